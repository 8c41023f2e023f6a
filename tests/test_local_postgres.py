"""The embedded Postgres: starts, serves SQL, survives a restart, fails clearly without binaries."""

import psycopg
import pytest

from pack_lab import local_postgres
from pack_lab.local_postgres import EmbeddedPostgres, PostgresUnavailable, postgres_dsn


def test_shared_dsn_serves_sql(pg_conn):
    assert pg_conn.execute("select 40 + 2").fetchone() == (42,)


def test_restart_keeps_data_and_port(pg_server):
    with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
        conn.execute("create table kept (k int primary key)")
        conn.execute("insert into kept values (1), (2)")
    port = pg_server.port
    pg_server.restart()
    assert pg_server.port == port
    with psycopg.connect(pg_server.dsn) as conn:
        assert conn.execute("select count(*) from kept").fetchone() == (2,)


def test_stopped_server_refuses_connections(pg_server):
    pg_server.stop()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(pg_server.dsn, connect_timeout=2)


def test_pg_dsn_env_wins(monkeypatch):
    monkeypatch.setenv("PG_DSN", "host=db.example.invalid dbname=x")
    with postgres_dsn() as dsn:
        assert dsn == "host=db.example.invalid dbname=x"


def test_missing_binaries_name_the_fixes(monkeypatch, tmp_path):
    monkeypatch.setattr(local_postgres, "candidate_bin_dirs", lambda: [tmp_path])
    with pytest.raises(PostgresUnavailable) as err:
        local_postgres.find_bin_dir()
    message = str(err.value)
    assert "PG_DSN" in message and "pgserver" in message and "PG_BIN" in message


def test_pgserver_binaries_work_as_fallback(monkeypatch):
    """A machine without a system Postgres gets one from the pgserver wheel."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("pgserver")
    if spec is None:
        pytest.skip("pgserver is not installed")
    bin_dir = Path(spec.origin).parent / "pginstall" / "bin"
    with EmbeddedPostgres(bin_dir=bin_dir, log=lambda _m: None) as server:
        with psycopg.connect(server.dsn) as conn:
            version = conn.execute("show server_version").fetchone()[0]
    assert version.split(".")[0].isdigit()


def test_runs_as_a_normal_user(tmp_path):
    """Root is handled above; a normal user runs the binaries directly (needs root to switch user)."""
    import os
    import shutil
    import subprocess
    from pathlib import Path

    runuser = shutil.which("runuser")
    system_python = Path("/usr/bin/python3")
    if os.geteuid() != 0 or not runuser or not system_python.exists():
        pytest.skip("needs root, runuser and /usr/bin/python3 to become another user")
    root = Path(__file__).resolve().parent.parent
    script = (
        "import sys, subprocess\n"
        f"sys.path.insert(0, {str(root)!r})\n"
        "from pack_lab.local_postgres import EmbeddedPostgres\n"
        "import os\n"
        "with EmbeddedPostgres(log=lambda m: None) as pg:\n"
        "    assert pg._owner is None\n"
        "    out = subprocess.run([str(pg._bin / 'pg_isready'), '-h', '127.0.0.1', '-p', str(pg.port)],\n"
        "                         capture_output=True, text=True)\n"
        "    print(os.geteuid(), out.returncode)\n"
    )
    result = subprocess.run([runuser, "-u", "nobody", "--", "env", "HOME=/tmp", str(system_python),
                             "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    uid, ready = result.stdout.split()
    assert uid != "0" and ready == "0"
