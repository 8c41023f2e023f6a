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

    # 4 slots a worker: either worker alone holds every task of the fault test (three long real-time tasks
    # and a micro-batch task), as a lost executor's tasks must find a free slot at once.
    with StandaloneCluster(workers=2, cores_per_worker=4, log=lambda _m: None) as cluster:
        yield cluster
