"""The server file and the key file of `rag serve` (rag_cli.serve.server_file): parsing, the line named
by every problem, sha256 matching, and the checks of `rag serve --check` on real projects."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from rag_cli.errors import BadInput
from rag_cli.serve.server_file import (EVERYTHING, check_collections, collection_options, read_key_file,
                                       read_server_file)


def sha(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_key_file_parses_and_matches_by_sha256(tmp_path):
    keys = read_key_file(write(tmp_path / "keys.toml", f"""
[keys.alice]
sha256 = "{sha('alice-key')}"
collections = ["finance", "eng"]

[keys.contractor]
env = "RAG_T_CONTRACTOR"
collections = ["eng"]
filter = {{ eng = "path=public/*" }}

[keys.admin]
sha256 = "{sha('admin-key')}"
collections = ["*"]
"""), environ={"RAG_T_CONTRACTOR": "c-key"})
    assert len(keys) == 3
    alice = keys.match("alice-key")
    assert alice.may_read("finance") and alice.may_read("eng") and not alice.may_read("hr")
    assert alice.scope("finance") == ()
    contractor = keys.match(b" c-key\n")
    assert contractor.may_read("eng") and not contractor.may_read("finance")
    assert contractor.scope("eng") == ("path=public/*",)
    assert keys.match("admin-key").collections is None and keys.match("admin-key").may_read("anything")
    assert keys.match("wrong") is None and keys.match("") is None
    assert EVERYTHING.may_read("x") and EVERYTHING.scope("x") == ()


@pytest.mark.parametrize("body, line, words", [
    ('[keys.a]\ncollections = ["x"]\n', 1, "exactly one of sha256"),
    ('[keys.a]\nsha256 = "abc"\ncollections = ["x"]\n', 2, "64 hex digits"),
    (f'[keys.a]\nsha256 = "{sha("k")}"\ncollections = ["x"]\n\n[keys.b]\nsha256 = "{sha("k")}"\n'
     'collections = ["y"]\n', 5, "the same key as 'a'"),
    ('[keys.a]\nenv = "RAG_T_UNSET_VAR"\ncollections = ["x"]\n', 2, "is not set or empty"),
    (f'[keys.a]\nsha256 = "{sha("k")}"\n', 1, "needs collections"),
    (f'[keys.a]\nsha256 = "{sha("k")}"\ncollections = ["x"]\nfilter = {{ y = "a=b" }}\n', 4,
     "not one of its collections"),
    (f'[keys.a]\nsha256 = "{sha("k")}"\ncollections = ["x"]\nfilter = {{ x = "team===x" }}\n', 4,
     "doubled operator"),
    (f'[keys.a]\nsha256 = "{sha("k")}"\ncollections = ["x"]\nkey = "plain"\n', 4, "unknown key 'key'"),
    ('[keys.a\n', 1, "not valid TOML"),
])
def test_a_bad_key_file_names_its_line(tmp_path, body, line, words):
    path = write(tmp_path / "keys.toml", body)
    with pytest.raises(BadInput) as err:
        read_key_file(path, environ={})
    assert f"{path}:{line}:" in str(err.value) and words in str(err.value), str(err.value)
    assert "plain" not in str(err.value).replace("unknown key 'key'", "")


def test_server_file_collections_and_limits(tmp_path):
    path = write(tmp_path / "serve.toml", """
[server]
port = 0
keys = "keys.toml"

[collections.finance]
folder = "fin"
max_k = 20

[collections.eng]
folder = "/srv/eng"
""")
    sf = read_server_file(path)
    assert [c.name for c in sf.collections] == ["finance", "eng"]
    assert sf.collections[0].folder == tmp_path / "fin" and sf.collections[0].options == {"max_k": 20}
    assert sf.collections[0].where == f"{path}:6"
    assert sf.server == {"port": 0} and sf.keys_path == tmp_path / "keys.toml" and sf.keys is None


@pytest.mark.parametrize("body, line, words", [
    ('[collections.a]\nfolder = "x"\nmax_k = 0\n', 3, "max_k"),
    ('[collections.a]\nfolder = "x"\nport = 1\n', 3, "put it in [server]"),
    ('[collections.a]\nmax_k = 3\n', 1, "has no folder"),
    ('[collections."a b"]\nfolder = "x"\n', 1, "must be 1 to 64"),
    ('[server]\nlog = true\n[collections.a]\nfolder = "x"\n', 2, "unknown key server.log"),
    ('[colections.a]\nfolder = "x"\n', 1, "unknown table [colections]"),
])
def test_a_bad_server_file_names_its_line(tmp_path, body, line, words):
    path = write(tmp_path / "serve.toml", body)
    with pytest.raises(BadInput) as err:
        read_server_file(path)
    assert f"{path}:{line}:" in str(err.value) and words in str(err.value), str(err.value)


def test_collection_options():
    specs = collection_options(["a=/x", "b = rel/y"])
    assert [(s.name, str(s.folder)) for s in specs] == [("a", "/x"), ("b", "rel/y")]
    for bad, words in (("a", "NAME=DIR"), ("a=/x,a=/y", "twice"), ("-a=/x", "must be")):
        with pytest.raises(BadInput, match="--collection") as err:
            collection_options(bad.split(","))
        assert words in str(err.value)


@pytest.fixture(scope="module")
def two_projects(make_sample_project, tmp_path_factory):
    base = tmp_path_factory.mktemp("sf")
    return make_sample_project(base / "a").root, make_sample_project(base / "b").root


def test_check_collections_and_scopes(two_projects, tmp_path):
    a, b = two_projects
    path = write(tmp_path / "serve.toml", f"""
[collections.a]
folder = "{a}"
[collections.b]
folder = "{b}"

[keys.ok]
sha256 = "{sha('k1')}"
collections = ["a", "b"]
filter = {{ a = "path=*.md" }}
""")
    sf = read_server_file(path)
    notes = check_collections(sf.collections, sf.keys)
    assert any(n.startswith("key ok: a (path=*.md), b") for n in notes), notes
    bad_field = path.read_text().replace("path=*.md", "team=finance")
    sf = read_server_file(write(path, bad_field))
    with pytest.raises(BadInput, match=rf"{path}:10: key 'ok', collection 'a': .*no field 'team'"):
        check_collections(sf.collections, sf.keys)
    missing = path.read_text().replace(f'folder = "{b}"', f'folder = "{tmp_path / "nothing"}"')
    sf = read_server_file(write(path, missing))
    with pytest.raises(BadInput, match=rf"{path}:4: collection 'b'"):
        check_collections(sf.collections, sf.keys)
    unserved = bad_field.replace('["a", "b"]', '["a", "c"]').replace("team=finance", "path=*")
    sf = read_server_file(write(path, unserved))
    with pytest.raises(BadInput, match=rf"{path}:7: key 'ok' names the collection 'c', which is not served"):
        check_collections(sf.collections, sf.keys)
