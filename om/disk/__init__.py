"""The disk: durable file operations every package that persists shares (a leaf: the
standard library only)."""
