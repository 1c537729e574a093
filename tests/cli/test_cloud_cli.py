from tests.waiting import wait_for


def test_world_lists_every_cloud_and_market(cli):
    data = cli("cloud", "world", "--json").json()
    clouds = {m["provider"] for m in data["markets"]}
    assert clouds == {
        "aws-sim",
        "gcp-sim",
        "azure-sim",
        "aliyun-sim",
        "tencent-sim",
        "volcengine-sim",
    }
    assert data["clouds"] == len(clouds)
    aws = [m for m in data["markets"] if m["provider"] == "aws-sim"]
    assert all(m["notice_lead_time_s"] == 120 and m["protocol"] == "aws" for m in aws)
    assert all(0 < m["spot_usd_per_hour"] < m["on_demand_usd_per_hour"] * 1.5 for m in aws)


def test_launch_ls_preempt_terminate(cli):
    launched = cli(
        "cloud",
        "launch",
        "azure-sim",
        "Standard_NC4as_T4_v3",
        "eastus",
        "--command",
        "sleep 300",
        "--json",
    )
    assert launched.code == 0, launched.err
    (instance,) = launched.json()
    instance_id = instance["instance_id"]
    assert instance["metadata_url"].startswith("http://127.0.0.1:")
    listed = cli("cloud", "ls", "--json").json()
    assert [i["instance_id"] for i in listed] == [instance_id]
    assert isinstance(listed[0]["cost_microusd"], int) and "cost_usd" not in listed[0]
    noticed = cli("cloud", "preempt", instance_id, "--lead-time", "600", "--json").json()[0]
    assert noticed["instance_id"] == instance_id
    wait_for(lambda: cli("cloud", "ls", "--json").json()[0]["state"] == "noticed")
    assert cli("cloud", "terminate", instance_id).code == 0
    wait_for(lambda: cli("cloud", "ls", "--all", "--json").json()[0]["state"] == "terminated")
    assert cli("cloud", "ls", "--json").json() == []
    table = cli("cloud", "ls", "--all").out
    assert instance_id in table and "terminated" in table


def test_bad_requests_are_clear_errors(cli):
    result = cli("cloud", "launch", "aws-sim", "g5.xlarge", "mars-1a")
    assert result.code == 2 and "not offered in mars-1a" in result.err
    result = cli("cloud", "launch", "ibm-sim", "g5.xlarge", "us-east-1a")
    assert result.code == 2 and "no cloud named 'ibm-sim'" in result.err
    result = cli("cloud", "preempt", "i-0nothing")
    assert result.code == 3 and "no instance 'i-0nothing'" in result.err
    assert cli("cloud", "terminate", "i-0nothing").code == 0  # a no-op, as clouds do


def _idle_aws_instance(cli):
    launched = cli(
        "cloud", "launch", "aws-sim", "g5.xlarge", "us-east-1a", "--command", "sleep 300", "--json"
    )
    assert launched.code == 0, launched.err
    return launched.json()[0]["instance_id"]


def test_preempt_with_advance_gives_the_rebalance_first(cli):
    instance_id = _idle_aws_instance(cli)
    noticed = cli(
        "cloud", "preempt", instance_id, "--advance", "900", "--lead-time", "600", "--json"
    )
    assert noticed.code == 0, noticed.err
    assert noticed.json()[0]["state"] in ("pending", "running")  # the final notice is 900 s away
    assert cli("cloud", "terminate", instance_id).code == 0
    wait_for(lambda: cli("cloud", "ls", "--all", "--json").json()[0]["state"] == "terminated")
    launched = cli(
        "cloud",
        "launch",
        "gcp-sim",
        "g2-standard-4",
        "us-central1-a",
        "--command",
        "sleep 300",
        "--json",
    )
    gcp_id = launched.json()[0]["instance_id"]
    refused = cli("cloud", "preempt", gcp_id, "--advance", "60")
    assert refused.code == 2 and "gives no advance notice" in refused.err
    assert cli("cloud", "terminate", gcp_id).code == 0


def test_maintenance_schedules_lists_and_cancels_an_event(cli):
    instance_id = _idle_aws_instance(cli)
    scheduled = cli(
        "cloud", "maintenance", instance_id, "--code", "instance-stop", "--in", "600", "--json"
    )
    assert scheduled.code == 0, scheduled.err
    [event] = scheduled.json()
    assert event["code"] == "instance-stop" and event["state"] == "active"
    assert event["not_after"] - event["not_before"] == 3600
    listed = cli("cloud", "maintenance", instance_id)
    assert event["event_id"] in listed.out and "instance-stop" in listed.out
    canceled = cli("cloud", "maintenance", instance_id, "--cancel", "all", "--json")
    assert [e["state"] for e in canceled.json()] == ["canceled"]
    bad = cli("cloud", "maintenance", instance_id, "--code", "meteor-strike")
    assert bad.code == 2 and "use one of instance-reboot" in bad.err
    assert cli("cloud", "terminate", instance_id).code == 0
    wait_for(lambda: cli("cloud", "ls", "--all", "--json").json()[0]["state"] == "terminated")
