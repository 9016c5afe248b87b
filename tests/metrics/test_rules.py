"""manifests/hami/files/monitoring/rules.yaml through Debian's promtool: valid, and every alert's fixtures."""

from __future__ import annotations

from pathlib import Path

from .prometheus import MONITORING, promtool

HERE = Path(__file__).resolve().parent


def test_rules_are_valid():
    out = promtool("check", "rules", str(MONITORING / "rules.yaml"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS: 8 rules found" in out.stdout


def test_every_alert_has_fixtures_that_fire_and_stay_quiet():
    import yaml
    alerts = {r["alert"] for g in yaml.safe_load((MONITORING / "rules.yaml").read_text())["groups"]
              for r in g["rules"]}
    cases = [c for t in yaml.safe_load((HERE / "rules_test.yaml").read_text())["tests"]
             for c in t["alert_rule_test"]]
    fires = {c["alertname"] for c in cases if c["exp_alerts"]}
    quiet = {c["alertname"] for c in cases if not c["exp_alerts"]}
    assert fires == alerts and quiet == alerts
    out = promtool("test", "rules", str(HERE / "rules_test.yaml"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout
