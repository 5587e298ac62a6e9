"""How fast: TTFT, inter-token latency, throughput and cost under vLLM's scheduler, capacity plans and a recommender.

The public names are re-exported from ``calculator``.
"""
