"""Shared helpers of the job (``spark-dp release``) tests: build a config, write it, and see what a run left.

Every job test keeps its ledger at ``<tmp_path>/ledger.db`` and its releases under
``<tmp_path>/releases`` (:func:`localise`), so :func:`charges` and :func:`written` can tell
whether a run charged or wrote anything.
"""

import os

import yaml

from spark_dp.privacy import open_ledger

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: An override value that removes the key (``{"privacy.epsilon": DELETE}``); ``None`` sets a YAML null.
DELETE = object()


def load_conf(name: str) -> dict:
    """A config from ``conf/`` (``"tensor_private_rows.yaml"``) or from a path, as a dict."""
    path = name if os.path.isabs(name) else os.path.join(ROOT, "conf", name)
    with open(path) as fh:
        return yaml.safe_load(fh)


def localise(cfg: dict, tmp_path, *, data: str | None = None, sampler: str | None = "numpy") -> dict:
    """Point the ledger and the output at ``tmp_path`` and, if given, ``dataset.path`` at ``data``.

    ``sampler="numpy"`` keeps the suite fast (the secure sampler the configs use is tested in the
    privacy suite); ``sampler=None`` keeps the config's own.
    """
    if data is not None:
        cfg["dataset"]["path"] = str(data)
    cfg["ledger"]["uri"] = f"sqlite:///{tmp_path}/ledger.db"
    cfg["output"]["path"] = str(tmp_path / "releases")
    if sampler is not None:
        cfg["privacy"]["sampler"] = sampler
    return cfg


def override(cfg: dict, over: dict) -> dict:
    """Apply ``{"section.key": value}`` and ``{"section": value}`` overrides in place; :data:`DELETE` removes."""
    for key, value in over.items():
        section, _, leaf = key.partition(".")
        if leaf:
            if value is DELETE:
                cfg[section].pop(leaf, None)
            else:
                cfg[section][leaf] = value
        elif value is DELETE:
            cfg.pop(section, None)
        else:
            cfg[section] = value
    return cfg


def write_config(tmp_path, cfg: dict, name: str = "job.yaml") -> str:
    """``cfg`` written as YAML to ``tmp_path / name``; its path."""
    p = tmp_path / name
    p.write_text(yaml.safe_dump(cfg))
    return str(p)


def charges(tmp_path) -> int:
    """Releases charged in ``tmp_path``'s ledger (0 when no run created the ledger)."""
    db = tmp_path / "ledger.db"
    return sum(s.releases for s in open_ledger(str(db)).status()) if db.exists() else 0


def written(tmp_path) -> list[str]:
    """Entries under ``tmp_path / "releases"`` (``[]`` when the directory was never created)."""
    out = tmp_path / "releases"
    return sorted(os.listdir(out)) if out.exists() else []
