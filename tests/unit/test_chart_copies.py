"""The charts' generated files follow crds/ (`make crds` writes them; no helm needed here).
tests/helm checks the charts themselves with a real helm."""

from charts import sync_from_crds


def test_chart_crds_and_values_schema_are_up_to_date(capsys):
    assert sync_from_crds.main(["--check"]) == 0, capsys.readouterr().err
