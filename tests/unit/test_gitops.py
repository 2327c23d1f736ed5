"""kcoder.gitops against real temporary git repositories."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from kcoder.gitops import GitOpsError, commit_accepted, list_accepted, undo_last

REPORT = {
    "problem": "softmax",
    "speedup_vs_eager": 2.1,
    "speedup_vs_compile": 1.42,
    "reward": 3,
    "device_name": "NVIDIA H200",
    "torch_version": "2.11.0",
    "model": "test-llm",
}


@pytest.fixture(autouse=True)
def _isolated_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # No global/system config (identity, hooks, templates) leaks into the tests, and repo
    # discovery stops at tmp_path so "outside any repository" really is outside.
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / ".gitconfig"))
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    for var in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_AUTHOR_NAME",
                "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL"):
        monkeypatch.delenv(var, raising=False)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True,
                          text=True).stdout


def make_repo(tmp_path: Path, *, identity: bool = True, commit: bool = True) -> Path:
    repo = tmp_path / "repo"
    (repo / "problems").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    if identity:
        git(repo, "config", "user.name", "Test User")
        git(repo, "config", "user.email", "test@example.com")
    (repo / "problems" / "softmax.py").write_text("class Model: pass\n")
    (repo / "README.md").write_text("readme\n")
    if commit:
        git(repo, "add", ".")
        git(repo, "commit", "-q", "-m", "initial")
    return repo


def candidate(tmp_path: Path, text: str = "class ModelNew: pass\n") -> Path:
    path = tmp_path / "run" / "model_new.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def snapshot(repo: Path) -> dict[str, object]:
    """Everything about the user's checkout that kcoder must leave alone."""
    head = subprocess.run(["git", "rev-parse", "--verify", "-q", "HEAD"], cwd=repo, check=False,
                          capture_output=True, text=True).stdout
    return {
        "status": git(repo, "status", "--porcelain", "--untracked-files=all"),
        "diff": git(repo, "diff"),
        "cached": git(repo, "diff", "--cached"),
        "head": head,
        "branch": git(repo, "symbolic-ref", "HEAD"),
        "index": (repo / ".git" / "index").read_bytes() if (repo / ".git" / "index").exists()
        else None,
        "files": {p.relative_to(repo).as_posix(): p.read_bytes()
                  for p in sorted(repo.rglob("*")) if p.is_file() and ".git" not in p.parts},
    }


def tree_files(repo: Path, rev: str) -> list[str]:
    return git(repo, "ls-tree", "-r", "--name-only", rev).split()


def test_commit_leaves_checkout_untouched(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    # A staged change, an uncommitted modification and an untracked file.
    (repo / "README.md").write_text("staged edit\n")
    git(repo, "add", "README.md")
    (repo / "problems" / "softmax.py").write_text("class Model: pass  # wip\n")
    (repo / "notes.txt").write_bytes(b"untracked \x00 bytes\n")
    before = snapshot(repo)
    assert before["cached"] and before["diff"]

    res = commit_accepted(repo / "problems" / "softmax.py", candidate(tmp_path), REPORT,
                          report_md="# report\n", verdict_correct=True)

    assert snapshot(repo) == before
    assert res.branch == "kcoder/softmax"
    assert git(repo, "rev-parse", "refs/heads/kcoder/softmax").strip() == res.commit
    assert git(repo, "rev-parse", f"{res.commit}^").strip() == before["head"].strip()
    kfiles = ["problems/kcoder/softmax/model_new.py", "problems/kcoder/softmax/report.json",
              "problems/kcoder/softmax/report.md"]
    assert res.files == kfiles
    # The branch is HEAD's tree plus exactly the new files (committed state, not the WIP).
    assert sorted(tree_files(repo, res.commit)) == sorted(["README.md", "problems/softmax.py",
                                                            *kfiles])
    assert git(repo, "show", f"{res.commit}:README.md") == "readme\n"
    assert git(repo, "show", f"{res.commit}:{kfiles[0]}") == "class ModelNew: pass\n"
    assert json.loads(git(repo, "show", f"{res.commit}:{kfiles[1]}")) == REPORT

    msg = git(repo, "log", "-1", "--format=%B", res.commit)
    assert msg.splitlines()[0] == (
        "kcoder: softmax 1.42x vs torch.compile, 2.10x vs eager (NVIDIA H200)")
    for text in ("2.10x", "1.42x", "2.11.0", "test-llm", "Kcoder-Reward: 3",
                 "Kcoder-Speedup-Eager: 2.10", "Kcoder-Speedup-Compile: 1.42",
                 "Kcoder-Device: NVIDIA H200", "Kcoder-Torch: 2.11.0", "Kcoder-Model: test-llm"):
        assert text in msg
    trailers = git(repo, "log", "-1", "--format=%(trailers:only,unfold)", res.commit)
    assert "Kcoder-Reward: 3" in trailers and "Kcoder-Model: test-llm" in trailers
    assert git(repo, "log", "-1", "--format=%an <%ae>", res.commit).strip() == (
        "Test User <test@example.com>")


def test_model_at_repo_root(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    (repo / "model.py").write_text("class Model: pass\n")
    res = commit_accepted(repo / "model.py", candidate(tmp_path), REPORT, verdict_correct=True)
    assert res.branch == "kcoder/model"
    assert res.files == ["kcoder/model/model_new.py", "kcoder/model/report.json"]


def test_stacking_and_undo(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    model = repo / "problems" / "softmax.py"
    before = snapshot(repo)
    first = commit_accepted(model, candidate(tmp_path, "v1\n"), REPORT, verdict_correct=True)
    second = commit_accepted(model, candidate(tmp_path, "v2\n"),
                             {**REPORT, "speedup_vs_compile": 1.8}, verdict_correct=True)
    assert git(repo, "rev-parse", f"{second.commit}^").strip() == first.commit
    assert git(repo, "show", f"kcoder/softmax:{second.files[0]}") == "v2\n"
    log_file = repo / ".git" / "kcoder" / "commits.jsonl"
    records = [json.loads(line) for line in log_file.read_text().splitlines()]
    assert [(r["commit"], r["previous"]) for r in records] == [
        (first.commit, None), (second.commit, first.commit)]

    undone = undo_last(repo)
    assert (undone.removed_commit, undone.restored_to) == (second.commit, first.commit)
    assert git(repo, "rev-parse", "kcoder/softmax").strip() == first.commit

    undone = undo_last(repo / "problems")
    assert (undone.removed_commit, undone.restored_to) == (first.commit, None)
    assert git(repo, "branch", "--list", "kcoder/*") == ""  # kcoder created it: deleted
    assert snapshot(repo) == before
    with pytest.raises(GitOpsError, match="no commits"):
        undo_last(repo)


def test_undo_keeps_a_branch_kcoder_did_not_create(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    git(repo, "branch", "kcoder/softmax")
    base = git(repo, "rev-parse", "kcoder/softmax").strip()
    commit_accepted(repo / "problems" / "softmax.py", candidate(tmp_path), REPORT,
                    verdict_correct=True)
    assert undo_last(repo).restored_to == base
    assert git(repo, "rev-parse", "kcoder/softmax").strip() == base


def test_undo_refuses_after_user_commit_on_top(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    res = commit_accepted(repo / "problems" / "softmax.py", candidate(tmp_path), REPORT,
                          verdict_correct=True)
    git(repo, "checkout", "-q", "kcoder/softmax")
    (repo / "extra.txt").write_text("mine\n")
    git(repo, "add", "extra.txt")
    git(repo, "commit", "-q", "-m", "user commit")
    git(repo, "checkout", "-q", "main")
    tip = git(repo, "rev-parse", "kcoder/softmax").strip()
    with pytest.raises(GitOpsError, match="refusing to undo"):
        undo_last(repo)
    assert git(repo, "rev-parse", "kcoder/softmax").strip() == tip != res.commit


def test_refuses_checked_out_kcoder_branch(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    model = repo / "problems" / "softmax.py"
    commit_accepted(model, candidate(tmp_path), REPORT, verdict_correct=True)
    git(repo, "checkout", "-q", "kcoder/softmax")
    with pytest.raises(GitOpsError, match="checked out"):
        commit_accepted(model, candidate(tmp_path), REPORT, verdict_correct=True)
    with pytest.raises(GitOpsError, match="checked out"):
        undo_last(repo)


def test_unverified_candidate_is_refused(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    with pytest.raises(GitOpsError, match="only a verified candidate can be committed"):
        commit_accepted(repo / "problems" / "softmax.py", candidate(tmp_path), REPORT,
                        verdict_correct=False)
    assert git(repo, "branch", "--list", "kcoder/*") == ""


def test_outside_a_repository(tmp_path: Path) -> None:
    model = tmp_path / "plain" / "model.py"
    model.parent.mkdir()
    model.write_text("class Model: pass\n")
    with pytest.raises(GitOpsError) as exc:
        commit_accepted(model, candidate(tmp_path), REPORT, verdict_correct=True)
    msg = str(exc.value)
    assert str(model) in msg and "not inside a git repository" in msg
    assert "git init" in msg and "best/model_new.py yourself" in msg
    assert "--no-commit" not in msg  # no such option exists
    with pytest.raises(GitOpsError, match="not inside a git repository"):
        list_accepted(model.parent)


def test_repo_without_commits_or_identity(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, identity=False, commit=False)
    git(repo, "add", "README.md")  # staged in an unborn branch
    before = snapshot(repo)
    res = commit_accepted(repo / "problems" / "softmax.py", candidate(tmp_path), REPORT,
                          verdict_correct=True)
    assert snapshot(repo) == before
    assert git(repo, "rev-list", "--count", res.commit).strip() == "1"  # a root commit
    assert tree_files(repo, res.commit) == res.files
    assert git(repo, "log", "-1", "--format=%an <%ae>|%cn <%ce>", res.commit).strip() == (
        "kcoder <kcoder@localhost>|kcoder <kcoder@localhost>")
    assert git(repo, "config", "--list", "--local").count("user.") == 0
    undo_last(repo)
    assert git(repo, "branch", "--list", "kcoder/*") == ""


def test_list_accepted(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    (repo / "problems" / "gelu.py").write_text("class Model: pass\n")
    soft = repo / "problems" / "softmax.py"
    a = commit_accepted(soft, candidate(tmp_path), REPORT, verdict_correct=True)
    b = commit_accepted(repo / "problems" / "gelu.py", candidate(tmp_path),
                        {**REPORT, "speedup_vs_compile": None, "speedup_vs_eager": 1.3,
                         "reward": 1}, verdict_correct=True)
    c = commit_accepted(soft, candidate(tmp_path, "v2\n"), REPORT, verdict_correct=True)
    git(repo, "branch", "kcoder/notes")  # a user branch under kcoder/ without kcoder commits

    got = list_accepted(repo / "problems")
    assert {k.commit for k in got} == {a.commit, b.commit, c.commit}
    assert got[0].date >= got[-1].date
    by = {k.commit: k for k in got}
    assert by[c.commit].branch == by[a.commit].branch == "kcoder/softmax"
    assert by[a.commit].speedup_vs_eager == pytest.approx(2.1)
    assert by[a.commit].speedup_vs_compile == pytest.approx(1.42)
    assert (by[a.commit].reward, by[a.commit].device, by[a.commit].model) == (
        3, "NVIDIA H200", "test-llm")
    assert by[b.commit].branch == "kcoder/gelu"
    assert by[b.commit].speedup_vs_compile is None and by[b.commit].reward == 1
    assert by[b.commit].subject == "kcoder: gelu 1.30x vs eager (NVIDIA H200)"
    # c stacks on a, so within the branch the newer one comes first.
    order = [k.commit for k in got]
    assert order.index(c.commit) < order.index(a.commit)


def test_list_accepted_without_kcoder_branches(tmp_path: Path) -> None:
    assert list_accepted(make_repo(tmp_path)) == []


def test_run_directories_stay_out_of_git_status(tmp_path: Path) -> None:
    from kcoder.workspace import Workspace

    repo = make_repo(tmp_path)
    (repo / "notes.txt").write_text("the user's own untracked file\n")
    before = snapshot(repo)["status"]
    problem = repo / "problems" / "softmax.py"
    first = Workspace.create(problem)  # .kcoder/runs/ beside the problem
    (first.root / "model_new.py").write_text("x = 1\n")
    Workspace.create(problem)  # a second run adds no second line
    assert first.root.is_relative_to(repo / "problems" / ".kcoder" / "runs")
    assert git(repo, "status", "--porcelain", "--untracked-files=all") == before
    exclude = (repo / ".git" / "info" / "exclude").read_text()
    assert exclude.count("/problems/.kcoder/runs/") == 1
    assert not (repo / ".gitignore").exists() and git(repo, "diff") == ""  # no tracked file edited


def test_run_directories_already_ignored_leave_exclude_alone(tmp_path: Path) -> None:
    from kcoder.gitexclude import exclude_from_git

    repo = make_repo(tmp_path)
    (repo / ".gitignore").write_text(".kcoder/\n")
    runs = repo / ".kcoder" / "runs"
    runs.mkdir(parents=True)
    exclude = repo / ".git" / "info" / "exclude"
    before = exclude.read_text() if exclude.exists() else None
    assert exclude_from_git(runs) is None
    assert (exclude.read_text() if exclude.exists() else None) == before
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    assert exclude_from_git(outside) is None  # not in a repository: nothing to do


def test_committed_reports_hold_relative_paths_and_the_device_name(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    run = repo / "problems" / ".kcoder" / "runs" / "softmax-1"
    report = {**REPORT, "device_name": "AMD EPYC 7B13", "candidate": str(run / "candidates" / "m_0001.py"),
              "problem": str(repo / "problems" / "softmax.py"),
              "log": f"{Path.home()}/.cache/kcoder/build/x.cpp:3: error; see {repo}"}
    res = commit_accepted(repo / "problems" / "softmax.py", candidate(tmp_path), report,
                          report_md=f"- file: `{run / 'best' / 'model_new.py'}`\n", verdict_correct=True)
    committed = git(repo, "show", f"{res.commit}:problems/kcoder/softmax/report.json")
    md = git(repo, "show", f"{res.commit}:problems/kcoder/softmax/report.md")
    assert str(tmp_path) not in committed + md + res.message
    data = json.loads(committed)
    assert data["candidate"] == "problems/.kcoder/runs/softmax-1/candidates/m_0001.py"
    assert data["log"] == "~/.cache/kcoder/build/x.cpp:3: error; see ."
    assert md == "- file: `problems/.kcoder/runs/softmax-1/best/model_new.py`\n"
    assert res.message.splitlines()[0].endswith("(AMD EPYC 7B13)")


def test_relative_paths_match_whole_components(tmp_path: Path) -> None:
    from kcoder.relpaths import relative_paths

    base = tmp_path / "proj"
    text = f"{base}/a.py {base}x/b.py {base} '{base}/c'"
    assert relative_paths({"k": [text]}, base) == {"k": [f"a.py {base}x/b.py . 'c'"]}


def test_device_names(tmp_path: Path) -> None:
    from kcoder.hostinfo import cpu_model, cuda_device

    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC  7B13 64-Core\n")
    assert cpu_model(info) == "AMD EPYC 7B13 64-Core"
    assert cpu_model(tmp_path / "missing") != ""

    class Cuda:
        @staticmethod
        def get_device_capability(index: int) -> tuple[int, int]:
            return (9, 0)

        @staticmethod
        def get_device_name(index: int) -> str:
            return "NVIDIA H200"

    class Torch:
        cuda = Cuda

    assert cuda_device(Torch) == "NVIDIA H200, sm_90"
