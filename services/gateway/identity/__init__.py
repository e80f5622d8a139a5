"""Who is asking: bearer credentials to a ``Principal`` (``auth``), request and running-task limits
(``ratelimit``), and the identity routes ``/v1/me`` and ``/v1/login`` (``routes``)."""
