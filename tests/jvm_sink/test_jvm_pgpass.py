"""The JVM sink takes the password from libpq's sources in libpq's order: DSN, PGPASSWORD, then the password file."""

from __future__ import annotations

import os

import pytest

from rtm_lakebase.jvm.sink import _jdbc_parts, pgpass_password
from rtm_lakebase.postgres import as_connection_settings


@pytest.fixture
def pgpass(tmp_path, monkeypatch):
    path = tmp_path / "pgpass"
    path.write_text("# comment\n"
                    "other.example:5432:*:*:not-this-one\n"
                    "db.example:5432:app:u:s3cr\\:et\n"
                    "*:*:*:*:fallback\n")
    os.chmod(path, 0o600)
    monkeypatch.setenv("PGPASSFILE", str(path))
    monkeypatch.delenv("PGPASSWORD", raising=False)
    return path


def test_first_matching_line_with_escapes_and_wildcards(pgpass):
    assert pgpass_password("db.example", "5432", "app", "u") == "s3cr:et"
    assert pgpass_password("db.example", "5433", "app", "u") == "fallback"


def test_the_dsn_without_password_takes_it_from_the_file_and_keeps_it_out_of_the_url(pgpass):
    url, user, password = _jdbc_parts(as_connection_settings("host=db.example port=5432 dbname=app user=u"))
    assert (user, password) == ("u", "s3cr:et") and "s3cr" not in url


def test_pgpassword_and_the_dsn_come_first(pgpass, monkeypatch):
    assert _jdbc_parts(as_connection_settings("host=db.example dbname=app user=u password=given"))[2] == "given"
    monkeypatch.setenv("PGPASSWORD", "from-env")
    assert _jdbc_parts(as_connection_settings("host=db.example dbname=app user=u"))[2] == "from-env"


def test_a_file_others_can_read_is_ignored_as_libpq_does(pgpass):
    os.chmod(pgpass, 0o644)
    assert pgpass_password("db.example", "5432", "app", "u") is None
