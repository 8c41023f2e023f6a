"""The cluster group (marker ``cluster``; `bash scripts/test.sh -m cluster`): one standalone cluster per session.

The cluster's daemons run here; every Spark driver of these tests runs in a
subprocess (``python -m pack_lab.cluster_stream``), never in the test session,
which keeps its own local SparkSession for the other groups.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def standalone_cluster():
    from pack_lab.standalone_cluster import StandaloneCluster

    with StandaloneCluster(workers=2, cores_per_worker=3, log=lambda _m: None) as cluster:
        yield cluster
