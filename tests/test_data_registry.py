"""The dataset registry (configs/datasets.yaml) against the published values and the shared files."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.cli import main
from harness.core.errors import HarnessError
from harness.core.fileio import file_digest
from harness.datasets.dataset_registry import dataset_registry, expand_dataset_names, get_dataset_record

BEIR_PUBLIC = [
    "msmarco",
    "trec-covid",
    "nfcorpus",
    "nq",
    "hotpotqa",
    "fiqa",
    "arguana",
    "webis-touche2020",
    "quora",
    "dbpedia-entity",
    "scidocs",
    "fever",
    "climate-fever",
    "scifact",
]
CQADUPSTACK_FORUMS = [
    "android",
    "english",
    "gaming",
    "gis",
    "mathematica",
    "physics",
    "programmers",
    "stats",
    "tex",
    "unix",
    "webmasters",
    "wordpress",
]
OFFICIAL = "https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets/"


def _sources_tables(beir_mirror: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(zip name -> md5, member path -> sha256) from the "Published pins" tables of SOURCES.md."""
    text = (beir_mirror / "SOURCES.md").read_text(encoding="utf-8")
    zips = dict(re.findall(r"^\| (\S+\.zip) \| [^|]+ \| ([0-9a-f]{32}) \|", text, flags=re.M))
    members = dict(re.findall(r"^\| (\S+/\S+) \| [\d,]+ \| ([0-9a-f]{64}) \|$", text, flags=re.M))
    return zips, members


def test_registry_lists_every_public_beir_dataset_and_the_cqadupstack_forums():
    registry = sorted(name for name, record in dataset_registry().items() if record.url)  # the BEIR zips
    expected = BEIR_PUBLIC + [f"cqadupstack/{forum}" for forum in CQADUPSTACK_FORUMS]
    assert sorted(registry) == sorted(expected)
    assert expand_dataset_names(["cqadupstack"]) == [f"cqadupstack/{forum}" for forum in CQADUPSTACK_FORUMS]
    assert expand_dataset_names(["scifact", "scifact"]) == ["scifact"]


def test_every_record_is_complete_and_consistent():
    beir = {name: record for name, record in dataset_registry().items() if record.url}
    for name, record in beir.items():
        assert record.url.startswith(OFFICIAL) and record.url.endswith(".zip"), name
        assert re.fullmatch(r"[0-9a-f]{32}", record.md5 or ""), name
        assert record.eval_split == ("dev" if name == "msmarco" else "test"), name
        assert record.eval_split in record.splits, name
        assert set(record.counts[record.eval_split]) == {"docs", "queries", "qrels"}, name
        assert all(re.fullmatch(r"[0-9a-f]{64}", pin) for pin in record.files.values()), name
        assert record.drop_identical_ids == (name in {"arguana", "quora"}), name
        if "cqadupstack" in record.groups:
            assert record.archive_name == "cqadupstack.zip" and record.archive_dir == name
        else:
            assert record.archive_name == f"{name}.zip" and record.archive_dir == name
            assert (record.hf_corpus, record.hf_qrels) == (f"BeIR/{name}", f"BeIR/{name}-qrels")
    # The BEIR README's CQADupStack row: 13,145 test queries over the 12 forums.
    forums = [record for record in beir.values() if "cqadupstack" in record.groups]
    assert sum(record.counts["test"]["queries"] for record in forums) == 13145


def test_checksums_agree_with_the_published_pins_in_sources_md(beir_mirror: Path):
    zips, members = _sources_tables(beir_mirror)
    assert len(zips) >= 7 and len(members) >= 20  # the tables were found
    registry = dataset_registry()
    for zip_name, md5 in zips.items():
        assert registry[zip_name.removesuffix(".zip")].md5 == md5
    for member, sha256 in members.items():
        name, relative = member.split("/", 1)
        assert registry[name].files[relative] == sha256, member
    pinned = {f"{name}/{relative}" for name, record in registry.items() for relative in record.files}
    assert pinned == set(members)


def test_scifact_pins_and_counts_match_the_shared_files(beir_mirror: Path):
    record = get_dataset_record("scifact")
    for relative, pin in record.files.items():
        assert file_digest(beir_mirror / "scifact" / relative) == pin
    assert record.counts["test"] == {"docs": 5183, "queries": 300, "qrels": 339}


def test_unknown_name_suggests_close_matches():
    with pytest.raises(HarnessError, match="unknown dataset 'scifakt'; did you mean scifact"):
        get_dataset_record("scifakt")


def test_cli_list_and_info(capsys, tmp_path: Path):
    assert main(["data", "list", "--data-dir", str(tmp_path)]) == 0
    listing = capsys.readouterr().out
    for name in BEIR_PUBLIC:
        assert re.search(rf"^{re.escape(name)}\s", listing, flags=re.M), name
    assert re.search(r"^scifact\s+test\s+5,183\s+300\s+339\s", listing, flags=re.M)
    assert re.search(r"^msmarco\s+dev\s+8,841,823\s+6,980\s+7,437\s", listing, flags=re.M)

    assert main(["data", "info", "arguana"]) == 0
    info = capsys.readouterr().out
    assert "8ad3e3c2a5867cdced806d6503f29b99" in info
    assert "drop identical ids: yes" in info
    assert "qrels/test.tsv   0c47b481fa8b47fb9ca5e74bc8a017bdea14518c0e4a5d21345291180b3aca76" in info


def test_cli_info_unknown_name_is_one_error_line(capsys):
    assert main(["data", "info", "nfcorpos"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("error: unknown dataset 'nfcorpos'; did you mean nfcorpus")


def test_user_overlay_adds_and_replaces_datasets(tmp_path: Path, monkeypatch):
    (tmp_path / "datasets.yaml").write_text(
        "datasets:\n"
        "  toy: {url: https://example.org/toy.zip, splits: [dev], eval_split: dev}\n"
        "  scifact: {url: https://example.org/scifact.zip, splits: [test], eval_split: test}\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("HARNESS_CONFIG_DIR", str(tmp_path))
    registry = dataset_registry()
    assert "nfcorpus" in registry  # shipped records stay
    assert registry["toy"].eval_split == "dev" and registry["toy"].archive_dir == "toy"
    assert registry["toy"].title == "toy"
    assert registry["scifact"].url == "https://example.org/scifact.zip" and registry["scifact"].files == {}


@pytest.mark.parametrize(
    ("yaml_text", "problem"),
    [
        (
            "datasets:\n  toy: {url: u, splits: [test], eval_split: test, eval_spilt: test}\n",
            "dataset 'toy': unknown key 'eval_spilt' (check its spelling)",
        ),
        ("datasets:\n  toy: {url: u, splits: [test]}\n", "dataset 'toy': missing key 'eval_split'"),
        (
            "datasets:\n  toy: {url: u, splits: [test], eval_split: dev}\n",
            "dataset 'toy': eval_split 'dev' not in splits ['test']",
        ),
        ("dataset:\n  toy: {url: u}\n", "unknown key 'dataset' (check its spelling)"),
    ],
)
def test_registry_typos_are_one_error_naming_file_and_key(
    tmp_path: Path, monkeypatch, capsys, yaml_text: str, problem: str
):
    (tmp_path / "datasets.yaml").write_text(yaml_text, encoding="utf-8")
    monkeypatch.setenv("HARNESS_CONFIG_DIR", str(tmp_path))
    assert main(["data", "list"]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {tmp_path / 'datasets.yaml'}: {problem}\n"


# ---- hub (MTEB-layout) records and benchmark groups (issue 30) --------------------------------------


def _user_registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> None:
    config = tmp_path / "config"
    config.mkdir(exist_ok=True)
    (config / "datasets.yaml").write_text("datasets:\n" + body, encoding="utf-8")
    monkeypatch.setenv("HARNESS_CONFIG_DIR", str(config))


def test_hub_record_needs_a_pinned_revision(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _user_registry(
        tmp_path, monkeypatch, "  toy:\n    hub: mteb/toy\n    splits: [test]\n    eval_split: test\n"
    )
    with pytest.raises(HarnessError, match=r"needs a pinned `hub_revision`") as error:
        dataset_registry()
    assert "datasets.yaml" in str(error.value) and "\n" not in str(error.value)


def test_record_needs_a_url_or_a_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _user_registry(tmp_path, monkeypatch, "  toy:\n    splits: [test]\n    eval_split: test\n")
    with pytest.raises(HarnessError, match=r"needs a `url` \(BEIR zip\) or a `hub`"):
        dataset_registry()


def test_benchmark_groups_expand_and_unknown_names_suggest_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub = "    hub: mteb/{0}\n    hub_revision: abc\n    splits: [test]\n    eval_split: test\n"
    _user_registry(
        tmp_path,
        monkeypatch,
        "  toy-a:\n" + hub.format("a") + "    group: [toy-bench, toy-other]\n"
        "  toy-b:\n" + hub.format("b") + "    group: toy-bench\n"
        "    hub_configs: {corpus: long_documents}\n    hub_layout: bright\n",
    )
    assert expand_dataset_names(["toy-bench"]) == ["toy-a", "toy-b"]
    assert expand_dataset_names(["toy-other", "scifact"]) == ["toy-a", "scifact"]
    assert get_dataset_record("toy-b").hub_configs == {"corpus": "long_documents"}
    with pytest.raises(HarnessError, match=r"unknown dataset 'toy-bnch'; did you mean toy-bench"):
        get_dataset_record("toy-bnch")
