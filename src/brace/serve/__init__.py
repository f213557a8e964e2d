"""``brace serve``: a private memory as an HTTP service (``docs/deploying.md``).

:func:`create_app` builds the ASGI application (Starlette) around a :class:`Service`
(the bank, one :class:`~brace.PrivateMemory` on the ledger, the published synopsis);
``brace serve`` runs it under uvicorn. Needs the ``serve`` extra.
"""

from .app import app_from_env, create_app
from .keys import ApiKey, KeyRing, hash_token, load_keys
from .requests import Limits
from .service import ServeConfig, Service

__all__ = ["create_app", "app_from_env", "Service", "ServeConfig", "Limits", "KeyRing",
           "ApiKey", "load_keys", "hash_token"]
