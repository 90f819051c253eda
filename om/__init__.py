"""An Ozone Manager with leader-side execution.

The leader executes each write once, records its row changes, batches many
requests' changes into one replicated PersistDb entry, and every node applies
those bytes. See docs/ARCHITECTURE.md.
"""
