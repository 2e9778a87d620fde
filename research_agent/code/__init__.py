"""The code agent's environment (features F1, F2, F4): sandbox, task loaders, API docs, tools.

``sandbox`` runs untrusted code; ``tasks`` loads benchmarks and checks solutions; ``apidocs`` turns
installed libraries into corpus documents for ``search_docs``; ``env`` parses model turns into the
three tools and runs them.
"""
