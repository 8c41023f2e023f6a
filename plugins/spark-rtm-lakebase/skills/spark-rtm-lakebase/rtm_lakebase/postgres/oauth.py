"""A ``password_provider`` for Lakebase OAuth: a fresh database credential at every login.

A Lakebase OAuth token lives one hour and is checked only at login, so the
writer must not carry a token made on the driver: it would be pickled into
every task and refused an hour later. Instead the settings carry this
function (picklable: a module-level function, bound to its endpoint with
``functools.partial``) and every ``open()`` and every reconnect on the
executor calls it for a new credential::

    from functools import partial
    from rtm_lakebase.postgres import ConnectionSettings, lakebase_token

    connection = ConnectionSettings(
        host="ep-example-123.database.us-west-2.cloud.databricks.com",
        dbname="databricks_postgres",
        user="my-service-principal-client-id",
        password_provider=partial(lakebase_token, "projects/p/branches/production/endpoints/primary"),
    )

``databricks-sdk`` is optional (the ``lakebase`` extra) and imported on the
first call; it authenticates with its default ("unified") configuration of
the process it runs in, e.g. ``DATABRICKS_HOST``, ``DATABRICKS_CLIENT_ID`` and
``DATABRICKS_CLIENT_SECRET`` in the executors' environment. No token is kept,
logged or put into a message here.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

_client: Any = None
_client_lock = threading.Lock()


class LakebaseOAuthError(RuntimeError):
    """No credential could be obtained; the message says why (it never holds a token)."""


def workspace_client() -> Any:
    """This process's ``databricks.sdk.WorkspaceClient``, made on first use."""
    global _client
    with _client_lock:
        if _client is None:
            try:
                from databricks.sdk import WorkspaceClient
            except ImportError:
                raise LakebaseOAuthError(
                    "lakebase_token needs the databricks-sdk package where the writer runs (every "
                    "executor): install the 'lakebase' extra of rtm_lakebase or databricks-sdk itself") from None
            try:
                _client = WorkspaceClient()
            except Exception as exc:  # no usable Databricks authentication in this process
                raise LakebaseOAuthError(f"databricks-sdk found no usable authentication here: "
                                         f"{type(exc).__name__}: {exc}") from None
        return _client


# --8<-- [start:lakebase_token]
def lakebase_token(endpoint: str | None = None, *, instance_name: str | None = None) -> str:
    """A new Lakebase database credential (valid one hour) for the identity the SDK runs as.

    ``endpoint``: a Lakebase Autoscaling compute,
    ``projects/{project}/branches/{branch}/endpoints/{endpoint}``.
    ``instance_name``: a Lakebase Provisioned database instance instead.
    """
    if (endpoint is None) == (instance_name is None):
        raise ValueError("give either endpoint= (Lakebase Autoscaling) or instance_name= (Lakebase Provisioned)")
    client = workspace_client()
    what = f"endpoint {endpoint}" if endpoint is not None else f"instance {instance_name}"
    try:
        if endpoint is not None:
            credential = client.postgres.generate_database_credential(endpoint=endpoint)
        else:
            credential = client.database.generate_database_credential(
                request_id=str(uuid.uuid4()), instance_names=[instance_name])
    except Exception as exc:  # the SDK's errors: auth, permissions, unknown endpoint, network
        raise LakebaseOAuthError(f"could not get a Lakebase credential for {what}: "
                                 f"{type(exc).__name__}: {exc}") from None
    token = getattr(credential, "token", None)
    if not isinstance(token, str) or not token:
        raise LakebaseOAuthError(f"the Lakebase credential for {what} came back without a token")
    return token
# --8<-- [end:lakebase_token]
