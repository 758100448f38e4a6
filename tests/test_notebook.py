"""notebooks/quickstart.ipynb runs end to end (nbclient): on a local kernel with its own local Spark,
and as a Databricks user runs it, on a Spark Connect session (the run's shared Connect server)."""

import os

import pytest

nbformat = pytest.importorskip("nbformat", reason="needs the test extra (nbclient, nbformat, ipykernel)")
nbclient = pytest.importorskip("nbclient", reason="needs the test extra (nbclient, nbformat, ipykernel)")
pytest.importorskip("ipykernel", reason="needs the test extra (nbclient, nbformat, ipykernel)")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run_notebook(tmp_path) -> list[dict]:
    """Executes the notebook in a fresh kernel (this process's environment); its code cells' outputs.

    One cell is appended (in memory, not in the file): it prints which SparkSession class the notebook had.
    """
    nb = nbformat.read(os.path.join(ROOT, "notebooks", "quickstart.ipynb"), as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell('print("session class:", type(spark).__module__)'))
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError on the first failing cell
    nbformat.write(nb, str(tmp_path / "executed.ipynb"))
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 5  # matrices, regression + PCA, tensor, sketch, report plot
    text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    assert "private heavy hitters" in text and "quickstart.points" in text
    assert not any(o.get("output_type") == "error" for o in outputs)
    return outputs


def test_quickstart_notebook_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARK_DP_MASTER", "local[2]")
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    text = "".join(o.get("text", "") for o in _run_notebook(tmp_path) if o.get("output_type") == "stream")
    assert "session class: pyspark.sql.session" in text, text[-500:]


def test_quickstart_notebook_runs_over_spark_connect(tmp_path, monkeypatch, connect_server):
    """The notebook unchanged, on a Spark Connect session: what a Databricks serverless or shared-cluster
    notebook has. ``get_spark()`` in its first cell picks up ``SPARK_REMOTE``, as on Databricks Connect."""
    monkeypatch.setenv("SPARK_REMOTE", connect_server.url)
    monkeypatch.delenv("SPARK_DP_MASTER", raising=False)
    text = "".join(o.get("text", "") for o in _run_notebook(tmp_path) if o.get("output_type") == "stream")
    assert "session class: pyspark.sql.connect.session" in text, text[-500:]
