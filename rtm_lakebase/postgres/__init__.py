"""Connecting to Lakebase/Postgres from an executor: settings, TLS choice, OAuth credentials.

:mod:`~rtm_lakebase.postgres.connection` (``ConnectionSettings``, ``Secret``,
``connect``), :mod:`~rtm_lakebase.postgres.tls` (the ``sslmode`` decision) and
:mod:`~rtm_lakebase.postgres.oauth` (``lakebase_token``, a password provider).
Shared by the Python writer (:mod:`rtm_lakebase.sink`) and the JVM sink (:mod:`rtm_lakebase.jvm`).
"""

from rtm_lakebase.postgres.connection import ConnectionSettings, Secret, as_connection_settings, connect, redact
from rtm_lakebase.postgres.oauth import LakebaseOAuthError, lakebase_token
from rtm_lakebase.postgres.tls import ConnectionSettingsError

__all__ = ["ConnectionSettings", "ConnectionSettingsError", "LakebaseOAuthError", "Secret", "as_connection_settings",
           "connect", "lakebase_token", "redact"]
