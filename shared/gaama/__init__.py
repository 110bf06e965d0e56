"""GAAMA core library: graph-augmented associative memory for agents.

The core knows nothing of Kafka or HTTP. Services in ``services/`` wire it to a broker
and to HTTP; the core offers the model, the stores, retrieval, extraction and the LLM client.
"""

__version__ = "0.1.0"
