"""The figures behind docs/, from one entry point: ``python -m bench.figures FIGURE``.

* ``integrity``: how long ``om admin verify`` and ``om admin audit`` take on a
  seeded 3-node cluster, and the write throughput before and while each runs
  (docs/operations/verify-and-repair.md, "What digests, verify and the scrub cost").
* ``scale``: two namespace sizes alternated on fresh seeded clusters: writes,
  lookups, pages of 1,000 keys, resident memory, start-up time
  (docs/PERFORMANCE.md, "Scale").
* ``wipe-catch-up``: a follower wiped and restarted on a large namespace, caught
  up by snapshot while writes go on, and the elections it cost
  (docs/operations/raft-snapshots.md).
* ``docs``: README's *Today's figures* regenerated from a main job's
  ``summary.json`` (measures nothing: it renders ``docs/figures/main-job.json``).

``bench.figures.runner`` holds what they share: starting a seeded cluster,
running ``om freon``, and turning what it wrote into numbers. Each figure prints
JSON. Run nothing else meanwhile: on two cores, any other load moves the figures.
"""
