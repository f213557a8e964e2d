"""brace: differentially private retrieval from dense associative memories."""
__version__ = "0.1.0"
