"""What a tree's code does, read from its ``ast``: the inflight function, the KV senders and
receivers, the decode queues, the bounded-wait semantics all of them share, and which backends
are live. The rules ask the models; the fixes read the same answers."""
