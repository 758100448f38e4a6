"""notebooks/quickstart.ipynb runs end to end on a local kernel (nbclient); its own local Spark starts in the kernel."""

import os

import pytest

nbformat = pytest.importorskip("nbformat", reason="needs the test extra (nbclient, nbformat, ipykernel)")
nbclient = pytest.importorskip("nbclient", reason="needs the test extra (nbclient, nbformat, ipykernel)")
pytest.importorskip("ipykernel", reason="needs the test extra (nbclient, nbformat, ipykernel)")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_quickstart_notebook_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARK_DP_MASTER", "local[2]")
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    nb = nbformat.read(os.path.join(ROOT, "notebooks", "quickstart.ipynb"), as_version=4)
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
