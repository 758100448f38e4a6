"""notebooks/quickstart.ipynb runs end to end (nbclient): on a local kernel with its own local Spark,
and as a Databricks user runs it, on a Spark Connect session (the run's shared Connect server).

The committed notebook carries its outputs (a reader sees results without running it), uses the current
manifest names, shows a preview and the released intervals, and leaves no temporary directory behind.
"""

import glob
import os
import tempfile

import pytest

nbformat = pytest.importorskip("nbformat", reason="needs the test extra (nbclient, nbformat, ipykernel)")
nbclient = pytest.importorskip("nbclient", reason="needs the test extra (nbclient, nbformat, ipykernel)")
pytest.importorskip("ipykernel", reason="needs the test extra (nbclient, nbformat, ipykernel)")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATH = os.path.join(ROOT, "notebooks", "quickstart.ipynb")


def _outputs(nb):
    return [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]


def _text(outputs):
    return "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")


def test_the_committed_notebook_has_its_outputs_and_current_names():
    nb = nbformat.read(PATH, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.get("outputs") for c in code), "execute the notebook before committing it (outputs are stored)"
    assert not any(o.get("output_type") == "error" for o in _outputs(nb))
    source = "".join(c.source for c in nb.cells)
    assert "noise_sigma" not in source  # renamed noise_scale (the old field is kept in manifests for old readers)
    assert "dp.preview.linear_regression(" in source and ".interval(" in source
    assert "would refuse: False" in _text(_outputs(nb)) and "[" in _text(_outputs(nb))


def _run_notebook(tmp_path) -> list[dict]:
    """Executes the notebook in a fresh kernel (this process's environment); its code cells' outputs.

    One cell is appended (in memory, not in the file): it prints which SparkSession class the notebook had.
    """
    scratch = os.path.join(tempfile.gettempdir(), "spark-dp-quickstart-*")
    before = set(glob.glob(scratch))
    nb = nbformat.read(PATH, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell('print("session class:", type(spark).__module__)'))
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError on the first failing cell
    nbformat.write(nb, str(tmp_path / "executed.ipynb"))
    outputs = _outputs(nb)
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 5  # matrices, regression + PCA, tensor, sketch, report plot
    text = _text(outputs)
    assert "private heavy hitters" in text and "quickstart.points" in text
    assert "would refuse: False" in text and "predicted 95% half-width per coefficient" in text  # the preview
    assert "x1·x2 entry:" in text and text.count("  [") >= 4  # the matrix's and the coefficients' intervals
    assert not any(o.get("output_type") == "error" for o in outputs)
    assert set(glob.glob(scratch)) == before  # its ledger and releases are removed by its last cell
    assert os.listdir(tmp_path) == ["executed.ipynb"]  # and nothing written where it runs
    return outputs


def test_quickstart_notebook_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARK_DP_MASTER", "local[2]")
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    text = _text(_run_notebook(tmp_path))
    assert "session class: pyspark.sql.session" in text, text[-500:]


def test_quickstart_notebook_runs_over_spark_connect(tmp_path, monkeypatch, connect_server):
    """The notebook unchanged, on a Spark Connect session: what a Databricks serverless or shared-cluster
    notebook has. ``get_spark()`` in its first cell picks up ``SPARK_REMOTE``, as on Databricks Connect."""
    monkeypatch.setenv("SPARK_REMOTE", connect_server.url)
    monkeypatch.delenv("SPARK_DP_MASTER", raising=False)
    text = _text(_run_notebook(tmp_path))
    assert "session class: pyspark.sql.connect.session" in text, text[-500:]
