"""Who may do what: the caller's identity (``auth``: tokens, the Unix peer by
``SO_PEERCRED`` in ``peer``), local accounts and their rules (``accounts``), and stored
secrets (``secrets``, encrypted with the home's key). Imports nothing else of the server."""
