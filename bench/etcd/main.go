// etcdbench: the closed-loop put load `om bench --flows etcd` drives through a
// 3-member etcd, the peer the OM's write throughput is compared with on the same
// machine. Each of -c workers puts unique keys of -size bytes: first for -warmup
// (not recorded), then for -d. Every measured put becomes one client_request
// record (docs/TRACES.md, op "Put") in -trace; one JSON summary line goes to
// stdout.
//
// Built at run time against Debian's packaged etcd sources (golang-etcd-server-dev):
//   GO111MODULE=off GOPATH=/usr/share/gocode go build -o etcdbench .
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/clientv3"
)

type record struct {
	V         int    `json:"v"`
	Kind      string `json:"kind"`
	Flow      string `json:"flow"`
	TNs       int64  `json:"t_ns"`
	Op        string `json:"op"`
	LatencyNs int64  `json:"latency_ns"`
	Status    string `json:"status"`
	Retries   int    `json:"retries"`
	Write     bool   `json:"write"`
}

func main() {
	endpoints := flag.String("endpoints", "127.0.0.1:2379", "comma-separated client endpoints")
	clients := flag.Int("c", 64, "puts in flight")
	conns := flag.Int("conns", 4, "gRPC connections")
	warmup := flag.Duration("warmup", 2*time.Second, "unrecorded load before measuring")
	dur := flag.Duration("d", 12*time.Second, "measured duration")
	size := flag.Int("size", 256, "value bytes")
	trace := flag.String("trace", "", "client_request JSONL output (required)")
	flow := flag.String("flow", "etcd", "the flow name in trace records")
	flag.Parse()
	if *trace == "" {
		fmt.Fprintln(os.Stderr, "etcdbench: -trace is required")
		os.Exit(2)
	}
	eps := strings.Split(*endpoints, ",")
	var cs []*clientv3.Client
	for i := 0; i < *conns; i++ {
		c, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second})
		if err != nil {
			fmt.Fprintln(os.Stderr, "etcdbench: cannot connect:", err)
			os.Exit(1)
		}
		defer c.Close()
		cs = append(cs, c)
	}
	val := strings.Repeat("v", *size)
	measureFrom := time.Now().Add(*warmup)
	deadline := measureFrom.Add(*dur)
	var mu sync.Mutex
	var all []record
	var wg sync.WaitGroup
	for w := 0; w < *clients; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			c := cs[w%len(cs)]
			var mine []record
			for i := 0; time.Now().Before(deadline); i++ {
				start := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := c.Put(ctx, fmt.Sprintf("/vol/bucket/k-%d-%d", w, i), val)
				cancel()
				if start.Before(measureFrom) {
					continue
				}
				status := "OK"
				if err != nil {
					status = "CLIENT_ERROR"
				}
				mine = append(mine, record{1, "client_request", *flow, start.UnixNano(), "Put",
					time.Since(start).Nanoseconds(), status, 0, true})
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		}(w)
	}
	wg.Wait()
	out, err := os.Create(*trace)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcdbench: cannot write the trace:", err)
		os.Exit(1)
	}
	writer := bufio.NewWriter(out)
	encoder := json.NewEncoder(writer)
	ok := 0
	for _, r := range all {
		if r.Status == "OK" {
			ok++
		}
		if err := encoder.Encode(r); err != nil {
			fmt.Fprintln(os.Stderr, "etcdbench: cannot write the trace:", err)
			os.Exit(1)
		}
	}
	if err := writer.Flush(); err != nil || out.Close() != nil {
		fmt.Fprintln(os.Stderr, "etcdbench: cannot write the trace")
		os.Exit(1)
	}
	fmt.Printf("{\"puts\": %d, \"fails\": %d, \"seconds\": %.2f, \"puts_per_s\": %.0f}\n",
		ok, len(all)-ok, dur.Seconds(), float64(ok)/dur.Seconds())
}
