"""Commit accepted kernels to `kcoder/<problem>` branches without touching the user's checkout.

Everything here goes through git plumbing (a temporary index, `commit-tree`, `update-ref`), so
the user's HEAD, current branch, index and working tree are never read into or written to.
Each commit kcoder makes is logged in `<git-common-dir>/kcoder/commits.jsonl`, which is what
lets `undo_last` remove exactly kcoder's last commit and nothing a human made.

A repository is a gitpython `git.Repo`; the commands that write go through its `git` command
object. gitpython is imported lazily so that importing this module (or the CLI) stays cheap.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kcoder.redact import redact, redact_data
from kcoder.relpaths import relative_paths

if TYPE_CHECKING:
    import git

KCODER_IDENTITY = ("kcoder", "kcoder@localhost")
TRAILER_PREFIX = "Kcoder-"
_ZERO = "0" * 40  # update-ref's "must not exist yet" old value


class GitOpsError(Exception):
    """A git operation kcoder refused or could not do; the message says how to proceed."""


@dataclass
class CommitResult:
    """What `commit_accepted` committed: branch name, commit hash, repo-relative files, message."""

    branch: str
    commit: str
    files: list[str]
    message: str


@dataclass
class UndoResult:
    """What `undo_last` removed; `restored_to` is None when the branch was deleted."""

    branch: str
    removed_commit: str
    restored_to: str | None


@dataclass
class AcceptedKernel:
    """One kcoder commit on a `kcoder/*` branch, with its trailers parsed."""

    branch: str
    commit: str
    date: datetime
    subject: str
    reward: int | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    device: str = ""
    torch_version: str = ""
    model: str = ""
    trailers: dict[str, str] = field(default_factory=dict)


def _gitpython() -> Any:
    try:
        import git  # gitpython; lazy so the CLI does not pay for it at startup
    except ImportError as e:  # also raised when no git executable is found
        raise GitOpsError(f"gitpython/git is not available: {e}") from e
    return git


def _run(command: git.Git, args: tuple[str, ...], env: dict[str, str] | None = None) -> str:
    """Run `git <args>` through gitpython's command object and return stdout; failures
    become GitOpsError."""
    git = _gitpython()
    try:
        return command.execute(["git", *args], env=env)
    except git.CommandError as e:  # GitCommandError, and GitCommandNotFound when git left the PATH
        err = (e.stderr or "").strip().removeprefix("stderr:").strip().strip("'")
        raise GitOpsError(f"git {' '.join(args[:2])} failed: {err or e}") from e


def _git(repo: git.Repo, *args: str, env: dict[str, str] | None = None) -> str:
    """`git <args>` in `repo`'s work tree (see _run)."""
    return _run(repo.git, args, env)


def _root(repo: git.Repo) -> Path:
    """The top of the work tree."""
    return Path(repo.working_tree_dir).resolve()


def _log_path(repo: git.Repo) -> Path:
    # In the common dir: shared by all worktrees, like the branches themselves.
    return Path(repo.common_dir).resolve() / "kcoder" / "commits.jsonl"


def find_repo(path: Path) -> git.Repo:
    """The repository whose work tree contains `path` (a file or directory)."""
    p = Path(path).expanduser().resolve()
    start = p if p.is_dir() else p.parent
    hint = (f"{p} is not inside a git repository; run `git init` there, or copy "
            ".kcoder/runs/<run>/best/model_new.py yourself")
    if not start.is_dir():
        raise GitOpsError(hint)
    git = _gitpython()
    try:
        # rev-parse, not gitpython's own search: it honours GIT_CEILING_DIRECTORIES etc.
        top = _run(git.Git(str(start)), ("rev-parse", "--show-toplevel"))
        return git.Repo(top)
    except (GitOpsError, git.InvalidGitRepositoryError, git.NoSuchPathError) as e:
        raise GitOpsError(f"{hint} ({e})") from e


def _rev(repo: git.Repo, rev: str) -> str | None:
    """Commit hash of `rev`, or None if it does not exist."""
    try:
        return _git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}") or None
    except GitOpsError:
        return None


def _refuse_if_checked_out(repo: git.Repo, ref: str) -> None:
    # Moving a branch that some worktree has checked out would silently change that
    # checkout's HEAD commit (and make its index look modified), so never do it.
    listing = _git(repo, "worktree", "list", "--porcelain")
    if f"branch {ref}" in listing.splitlines():
        raise GitOpsError(
            f"{ref.removeprefix('refs/heads/')} is checked out; switch to another branch first "
            "(kcoder never moves a checked-out branch)"
        )


def _one_line(x: Any) -> str:
    # Trailers and body rows must stay on one line, or git stops reading them as trailers.
    return " ".join(str(x if x is not None else "").split()) or "unknown"


def build_message(stem: str, report: dict[str, Any], model_rel: str) -> str:
    """The commit message: a summary subject, a readable body, and `Kcoder-*` trailers."""
    eager, comp = report.get("speedup_vs_eager"), report.get("speedup_vs_compile")
    device = _one_line(report.get("device_name"))
    parts = [f"{v:.2f}x vs {name}" for v, name in ((comp, "torch.compile"), (eager, "eager"))
             if v is not None]
    summary = ", ".join(parts) or f"accepted (reward {report.get('reward')})"
    # (body label, trailer key, value): one table so body and trailers cannot disagree.
    rows = [
        ("Speed-up vs eager", "Speedup-Eager", "n/a" if eager is None else f"{eager:.2f}"),
        ("Speed-up vs torch.compile", "Speedup-Compile", "n/a" if comp is None else f"{comp:.2f}"),
        ("Device", "Device", device),
        ("Torch", "Torch", _one_line(report.get("torch_version"))),
        ("Model", "Model", _one_line(report.get("model"))),
        ("Reward", "Reward", _one_line(report.get("reward"))),
    ]
    body = "\n".join(f"{label + ':':<27}{v}{'x' if 'Speed' in label and v != 'n/a' else ''}"
                     for label, _, v in rows)
    trailers = "\n".join(f"{TRAILER_PREFIX}{key}: {v}" for _, key, v in [rows[-1], *rows[:-1]])
    intro = f"Verified custom-kernel candidate for {model_rel} (problem {_one_line(stem)})."
    return f"kcoder: {stem} {summary} ({device})\n\n{intro}\n\n{body}\n\n{trailers}\n"


def _identity_env(repo: git.Repo) -> dict[str, str]:
    """Env for commit-tree: kcoder's identity only where the user has none configured."""
    def configured(key: str) -> bool:
        try:
            return bool(_git(repo, "config", "--get", key))
        except GitOpsError:  # exit code 1: not set
            return False

    env: dict[str, str] = {}
    if configured("user.name") and configured("user.email"):
        return env
    name, email = KCODER_IDENTITY
    for role in ("AUTHOR", "COMMITTER"):
        # An identity given through the environment is the user's choice; keep it.
        if not (os.environ.get(f"GIT_{role}_NAME") and os.environ.get(f"GIT_{role}_EMAIL")):
            env[f"GIT_{role}_NAME"], env[f"GIT_{role}_EMAIL"] = name, email
    return env


def _append_log(repo: git.Repo, record: dict[str, Any]) -> None:
    log = _log_path(repo)
    log.parent.mkdir(parents=True, exist_ok=True)
    record = {"time": datetime.now(timezone.utc).isoformat(timespec="seconds"), **record}
    with log.open("a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def _live_commits(repo: git.Repo) -> list[dict[str, Any]]:
    """kcoder's commits not undone yet, oldest first (replaying the append-only log)."""
    live: list[dict[str, Any]] = []
    log = _log_path(repo)
    lines = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
    for line in lines:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue  # a torn line from a crash must not block undo
        if rec.get("action") == "commit":
            live.append(rec)
        elif rec.get("action") == "undo":
            live = [r for r in live if r.get("commit") != rec.get("commit")]
    return live


def commit_accepted(
    model_path: Path,
    candidate_file: Path,
    report: dict[str, Any],
    *,
    report_md: str | None = None,
    verdict_correct: bool,
) -> CommitResult:
    """Commit a verified candidate (+ report) to branch `kcoder/<stem>` without a checkout.

    The branch starts from the current HEAD (or from nothing in an empty repo). Files land in
    `<model dir>/kcoder/<stem>/`: model_new.py, report.json and, if given, report.md.
    """
    model_path = Path(model_path)
    if not verdict_correct:
        raise GitOpsError(
            f"only a verified candidate can be committed: {candidate_file} did not pass "
            "verification, so it was not committed"
        )
    candidate = Path(candidate_file).expanduser().resolve()
    if not candidate.is_file():
        raise GitOpsError(f"candidate file {candidate} does not exist")
    repo = find_repo(model_path)
    stem = model_path.stem
    branch = f"kcoder/{stem}"
    ref = f"refs/heads/{branch}"
    try:
        _git(repo, "check-ref-format", ref)
    except GitOpsError as e:
        raise GitOpsError(f"cannot name a branch after {model_path.name!r}: {branch}") from e
    _refuse_if_checked_out(repo, ref)

    rel = model_path.expanduser().resolve().relative_to(_root(repo))
    model_rel, prefix = rel.as_posix(), (rel.parent / "kcoder" / stem).as_posix() + "/"

    old = _rev(repo, ref)
    parent = old or _rev(repo, "HEAD")  # None: unborn HEAD, so a root commit
    # What leaves the machine never carries a secret's value, nor a local absolute path.
    report = relative_paths(redact_data(report), _root(repo))
    report_md = None if report_md is None else relative_paths(report_md, _root(repo))
    message = build_message(stem, report, model_rel)
    with tempfile.TemporaryDirectory(prefix="kcoder-git-") as tmp:
        t = Path(tmp)
        (t / "report.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
        sources = {"model_new.py": candidate, "report.json": t / "report.json"}
        if report_md is not None:
            (t / "report.md").write_text(redact(report_md))
            sources["report.md"] = t / "report.md"
        (t / "message").write_text(message)
        # A private index: the user's .git/index (and staged changes) is never opened.
        env = {"GIT_INDEX_FILE": str(t / "index")}
        _git(repo, "read-tree", f"{parent}^{{tree}}" if parent else "--empty", env=env)
        files = []
        for name, src in sources.items():
            # --no-filters: store the exact bytes that were verified, not a converted copy.
            blob = _git(repo, "hash-object", "-w", "--no-filters", "--", str(src))
            path = prefix + name
            _git(repo, "update-index", "--add", "--cacheinfo", f"100644,{blob},{path}",
                 env=env)
            files.append(path)
        tree = _git(repo, "write-tree", env=env)
        parents = ["-p", parent] if parent else []
        commit = _git(repo, "commit-tree", tree, *parents, "-F", str(t / "message"),
                      env=_identity_env(repo))
    # Passing the old value makes this a compare-and-swap: a concurrent move of the branch
    # makes us fail instead of silently dropping someone's commit.
    _git(repo, "update-ref", "-m", f"kcoder: commit {stem}", ref, commit, old or _ZERO)
    _append_log(repo, {"action": "commit", "commit": commit, "branch": branch,
                       "previous": old, "files": files})
    return CommitResult(branch=branch, commit=commit, files=files, message=message)


def undo_last(repo_path: Path) -> UndoResult:
    """Remove the last commit kcoder made (and only it), by moving its branch back.

    Deletes the branch if kcoder created it with that commit. Refuses if the branch tip is no
    longer kcoder's commit. HEAD, index and working tree are never touched.
    """
    repo = find_repo(Path(repo_path))
    live = _live_commits(repo)
    if not live:
        raise GitOpsError(f"kcoder has made no commits in {_root(repo)} that could be undone")
    rec = live[-1]
    branch, commit, previous = rec["branch"], rec["commit"], rec.get("previous")
    ref = f"refs/heads/{branch}"
    tip = _rev(repo, ref)
    if tip != commit:
        state = f"is at {tip[:12]}" if tip else "no longer exists"
        raise GitOpsError(
            f"refusing to undo: branch {branch} {state}, not kcoder's last commit {commit[:12]} "
            "(someone changed the branch since); fix the branch by hand with `git branch -f`"
        )
    _refuse_if_checked_out(repo, ref)
    if previous:
        _git(repo, "update-ref", "-m", "kcoder: undo", ref, previous, commit)
    else:
        _git(repo, "update-ref", "-d", ref, commit)  # kcoder created it: delete it
    _append_log(repo, {"action": "undo", "commit": commit, "branch": branch,
                       "restored_to": previous})
    return UndoResult(branch=branch, removed_commit=commit, restored_to=previous)


def _parse_trailers(body: str) -> dict[str, str]:
    """`Kcoder-*` trailers from the message's last paragraph."""
    last = body.strip().split("\n\n")[-1]
    out = {}
    for line in last.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.startswith(TRAILER_PREFIX) and " " not in key:
            out[key] = value.strip()
    return out


def _num(text: str | None, kind: type) -> Any:
    try:
        return kind(text) if text is not None else None
    except ValueError:
        return None  # "n/a": that baseline was not measured


def list_accepted(path: Path) -> list[AcceptedKernel]:
    """Every kcoder commit on `kcoder/*` branches of the repo containing `path`, newest first."""
    repo = find_repo(Path(path))
    refs = [head.path for head in repo.heads if head.name.startswith("kcoder/")]
    if not refs:
        return []
    # --source attributes each commit to the branch it was reached from; --grep prunes the
    # (possibly huge) user history that the branches share with HEAD.
    out = _git(repo, "log", "--source", "--grep=^Kcoder-Reward:",
               "--format=%H%x1f%S%x1f%cI%x1f%s%x1f%B%x1e", *refs, "--")
    found = []
    for entry in out.split("\x1e"):
        fields = entry.strip("\n").split("\x1f")
        if len(fields) != 5:
            continue
        commit, source, date, subject, body = fields
        tr = _parse_trailers(body)
        if "Kcoder-Reward" not in tr:
            continue
        found.append(AcceptedKernel(
            branch=source.removeprefix("refs/heads/"), commit=commit,
            date=datetime.fromisoformat(date), subject=subject,
            reward=_num(tr.get("Kcoder-Reward"), int),
            speedup_vs_eager=_num(tr.get("Kcoder-Speedup-Eager"), float),
            speedup_vs_compile=_num(tr.get("Kcoder-Speedup-Compile"), float),
            device=tr.get("Kcoder-Device", ""), torch_version=tr.get("Kcoder-Torch", ""),
            model=tr.get("Kcoder-Model", ""), trailers=tr,
        ))
    found.sort(key=lambda k: k.date, reverse=True)  # stable: log order breaks date ties
    return found
