"""Pools, service-free: the file's rules (shared/pools.py), where a job's marker lives and
which topic its doorbell takes, each pool's drain listing only its own markers while the
sweep lists every pool's (old top-level markers included), the stale time of a job's pool,
and the gate that sends a delivery on to its own pool instead of running it."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from shared import pools, records, sweeper
from shared.config import Settings
from shared.doorbell import Doorbell
from shared.errors import ConfigError
from shared.features.table import context
from shared.outcome import OutcomeKind
from shared.pools import DEFAULT, Pool, parse
from shared.queue import Queue, parse_submission
from shared.storage import pending_object
from shared.stores.memory import MemoryStore
from tests.unit.unit_support import Bell, Clock, handle, pipeline, settings

LIGHT = {"pipelines": ["upload-digest"], "concurrency": 8, "stale_seconds": 60}
HEAVY = {"pipelines": ["webhook"], "memory": "4Gi", "cpu": "2", "concurrency": 1}


def write(tmp_path: Path, doc: Any, name: str = "pools.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    return path


def pooled(tmp_path: Path, pool: str = DEFAULT, **kw: Any) -> Settings:
    path = write(tmp_path, {"pools": {"light": LIGHT, "heavy": HEAVY}})
    return settings(pools_file=str(path), pool=pool, **kw)


# --- the file


def test_every_field_but_pipelines_has_todays_claim_default() -> None:
    found = parse({"pools": {"light": {"pipelines": ["a", "b"]}}})
    light = found.get("light")
    assert light == Pool("light", ("a", "b"))
    assert (light.memory, light.cpu, light.concurrency, light.timeout_seconds) == (
        "1Gi",
        "1",
        4,
        1800,
    )
    assert (light.ack_deadline_seconds, light.max_delivery_attempts, light.runner) == (
        600,
        20,
        "push",
    )
    assert light.stale_seconds is None and light.job is None
    assert found.names == (DEFAULT, "light")


def test_lookups_route_named_pipelines_and_leave_the_rest_to_the_default_pool() -> None:
    found = parse({"pools": {"light": LIGHT, "heavy": HEAVY}})
    assert found.name_of("webhook") == "heavy" and found.name_of("demo") == DEFAULT
    assert found.name_of(None) == DEFAULT and found.name_of(42) == DEFAULT
    assert found.marker_of("demo") is None and found.marker_of("upload-digest") == "light"
    assert found.stale_seconds_of("upload-digest", 120.0) == 60.0
    assert found.stale_seconds_of("webhook", 120.0) == 120.0  # heavy names none
    assert pools.topic_of("reclaim-jobs", DEFAULT) == "reclaim-jobs"
    assert pools.topic_of("reclaim-jobs", "heavy") == "reclaim-jobs-heavy"


def test_a_job_pool_takes_its_sizing_and_a_gpu_caps_its_task_at_an_hour() -> None:
    spec = {"pipelines": ["render"], "runner": "job", "job": {"gpu": {"type": "nvidia-l4"}}}
    job = parse({"pools": {"gpu": spec}}).get("gpu").job
    assert job is not None and job.gpu == pools.Gpu("nvidia-l4", 1)
    assert job.task_timeout_seconds == pools.MAX_GPU_TASK_S
    assert (job.cpu, job.memory) == ("4", "16Gi")  # an L4's minimums (job_sizing.json)
    plain = parse({"pools": {"long": {"pipelines": ["r"], "runner": "job"}}}).get("long").job
    assert plain is not None and plain.gpu is None and plain.task_timeout_seconds == 86400
    assert (plain.cpu, plain.memory, plain.max_executions) == ("1", "2Gi", 100)


def test_a_dispatched_execution_not_yet_started_is_judged_by_its_start_grace() -> None:
    """F9: nothing heartbeats before the task adopts the claim, so a slow start is not a
    silent owner until the pool's start grace has passed."""
    spec = {
        "pipelines": ["r"],
        "runner": "job",
        "stale_seconds": 4,
        "job": {"start_grace_seconds": 60},
    }
    found = parse({"pools": {"slow": spec}})
    running = {"pipeline": "r", "status": "running", "attempts": 2}
    dispatched = {**running, "execution": {"attempt": 2, "dispatched_at": "2026-01-01T00:00:00Z"}}
    adopted = {**dispatched, "execution": {**dispatched["execution"], "adopted_at": "x"}}
    older = {**dispatched, "execution": {**dispatched["execution"], "attempt": 1}}
    assert found.stale_seconds_for(dispatched, 120.0) == 60.0
    for job in (running, adopted, older, {**dispatched, "status": "queued"}):
        assert found.stale_seconds_for(job, 120.0) == 4.0
    assert found.stale_seconds_for({**dispatched, "pipeline": "other"}, 120.0) == 120.0


BAD = [
    ({"pools": {"a": {"pipelines": ["x"]}, "b": {"pipelines": ["x"]}}}, "'x' is in two pools"),
    ({"pools": {"default": {"pipelines": ["x"]}}}, "is implicit"),
    ({"pools": {"Light": {"pipelines": ["x"]}}}, "pool name 'Light'"),
    ({"pools": {"a" * 21: {"pipelines": ["x"]}}}, "at most 20"),
    ({"pools": {"a": {"pipelines": []}}}, "pool 'a': pipelines must be a non-empty list"),
    ({"pools": {"a": {"pipelines": ["x", "x"]}}}, "lists a pipeline twice"),
    ({"pools": {"a": {"pipelines": ["x"], "memroy": "1Gi"}}}, "unknown field(s) ['memroy']"),
    ({"pools": {"a": {"pipelines": ["x"], "concurrency": 0}}}, "concurrency must be"),
    ({"pools": {"a": {"pipelines": ["x"], "concurrency": True}}}, "concurrency must be"),
    ({"pools": {"a": {"pipelines": ["x"], "memory": "4GB"}}}, "memory '4GB' is not valid"),
    ({"pools": {"a": {"pipelines": ["x"], "cpu": "0.5"}}}, "concurrency > 1 needs cpu >= 1"),
    ({"pools": {"a": {"pipelines": ["x"], "timeout_seconds": 60}}}, "timeout_seconds must be >="),
    ({"pools": {"a": {"pipelines": ["x"], "min_instances": 3, "max_instances": 2}}}, "min_inst"),
    ({"pools": {"a": {"pipelines": ["x"], "stale_seconds": 1}}}, "stale_seconds must be"),
    ({"pools": {"a": {"pipelines": ["x"], "ack_deadline_seconds": 900}}}, "ack_deadline"),
    ({"pools": {"a": {"pipelines": ["x"], "max_delivery_attempts": 3}}}, "max_delivery"),
    ({"pools": {"a": {"pipelines": ["x"], "runner": "batch"}}}, "runner must be one of"),
    ({"pools": {"a": {"pipelines": ["x"], "job": {}}}}, 'only for runner "job"'),
    (
        {
            "pools": {
                "a": {
                    "pipelines": ["x"],
                    "runner": "job",
                    "job": {"gpu": {"type": "nvidia-l4"}, "task_timeout_seconds": 7200},
                }
            }
        },
        "task_timeout_seconds must be a whole number within 1..3600",
    ),
    (
        {"pools": {"a": {"pipelines": ["x"], "runner": "job", "job": {"gpu": {"type": "t4"}}}}},
        "job.gpu.type must be a GPU Cloud Run jobs offer (nvidia-l4)",
    ),
    (
        {
            "pools": {
                "a": {
                    "pipelines": ["x"],
                    "runner": "job",
                    "job": {"gpu": {"type": "nvidia-l4"}, "cpu": "4", "memory": "4Gi"},
                }
            }
        },
        "needs at least 4 CPU and 16 GiB",
    ),
    (
        {
            "pools": {
                "a": {"pipelines": ["x"], "runner": "job", "job": {"cpu": "1", "memory": "8Gi"}}
            }
        },
        "with 1 vCPU a job has 512..4096 MiB",
    ),
    (
        {"pools": {"a": {"pipelines": ["x"], "runner": "job", "job": {"max_executions": 0}}}},
        "job.max_executions must be a whole number within 1..1000",
    ),
    ({"pools": {"a": {"pipelines": ["x"], "runner": "job", "job": {"disk": 1}}}}, "job: unknown"),
    ({"pools": []}, '"pools" must be an object'),
    ({"pool": {}}, 'one key, "pools"'),
]


@pytest.mark.parametrize(("doc", "message"), BAD, ids=[m for _, m in BAD])
def test_a_bad_file_is_refused_naming_the_pool_and_field(doc: Any, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse(doc)
    assert message in str(err.value)


def test_no_file_means_no_pools_and_a_bad_one_stops_the_settings(tmp_path: Path) -> None:
    assert Settings.from_env({}).pools.names == (DEFAULT,)
    assert pools.load_pools(None) is pools.NO_POOLS
    broken = write(tmp_path, "{not json", "broken.json")
    with pytest.raises(ConfigError, match=r"broken\.json is not readable JSON"):
        Settings.from_env({"RECLAIM_POOLS_FILE": str(broken)})
    twice = write(tmp_path, {"pools": {"a": {"pipelines": ["x"]}, "b": {"pipelines": ["x"]}}})
    with pytest.raises(ConfigError, match="two pools"):
        Settings.from_env({"RECLAIM_POOLS_FILE": str(twice)})
    with pytest.raises(ConfigError, match="does not exist"):
        Settings.from_env({"RECLAIM_POOLS_FILE": str(tmp_path / "gone.json")})


def test_a_claim_serves_a_known_pool_and_heartbeats_by_its_stale_time(tmp_path: Path) -> None:
    path = str(write(tmp_path, {"pools": {"light": LIGHT, "heavy": HEAVY}}))
    with pytest.raises(ConfigError, match=r"RECLAIM_POOL=.medium. is not a pool"):
        Settings.from_env({"RECLAIM_POOLS_FILE": path, "RECLAIM_POOL": "medium"})
    with pytest.raises(ConfigError, match="RECLAIM_POOL='Bad'"):
        Settings.from_env({"RECLAIM_POOL": "Bad"})
    light = Settings.from_env({"RECLAIM_POOLS_FILE": path, "RECLAIM_POOL": "light"})
    assert light.pool == "light" and light.stale_seconds == 60.0
    heavy = Settings.from_env({"RECLAIM_POOLS_FILE": path, "RECLAIM_POOL": "heavy"})
    assert heavy.stale_seconds == 120.0  # it names none: the deployment's
    assert Settings.from_env({}).pool == DEFAULT


# --- markers and doorbells


def test_each_pool_lists_its_own_markers_and_old_markers_are_the_default_pools() -> None:
    store = MemoryStore()
    store.put_object(store.bucket_name, "pending/old-1", b"")  # before pools and hashes
    store.add_pending("l-1", pool="light")
    store.add_pending("h-1", pool="heavy")
    store.add_pending("d-1", pool=DEFAULT)  # the default pool's folder is the top level
    assert store.raw(store.bucket_name, pending_object("l-1", "light")) is not None
    assert store.raw(store.bucket_name, pending_object("d-1")) is not None
    assert sorted(e.job_id for e in store.list_pending(pool=DEFAULT)) == ["d-1", "old-1"]
    assert [e.job_id for e in store.list_pending(pool="light")] == ["l-1"]
    every = store.list_pending()
    assert [(e.pool, e.job_id) for e in every] == [
        (None, "d-1"),
        ("heavy", "h-1"),
        ("light", "l-1"),
        (None, "old-1"),
    ]
    light = pending_object("l-1", "light").removeprefix("pending/")
    assert [e.key for e in store.list_pending(start_at="light/")] == [light, "old-1"]
    store.mark_due("l-1", datetime.now(UTC), pool="light")
    assert store.list_pending(pool="light")[0].due is not None
    store.remove_pending("l-1", pool="light")
    assert store.list_pending(pool="light") == []


def test_submit_puts_a_pooled_jobs_marker_in_its_pool_and_rings_its_pipeline(
    tmp_path: Path,
) -> None:
    store, bell = MemoryStore(), Bell()
    s = pooled(tmp_path)
    queue = Queue(store, bell, s)
    body = {
        "jobs": [
            {"pipeline": "upload-digest", "payload": {"bucket": "b", "name": "n"}},
            {"pipeline": "demo"},
        ]
    }
    result = queue.submit(parse_submission(body, s))
    light, plain = (job.job_id for job in result.jobs)
    assert [e.job_id for e in store.list_pending(pool="light")] == [light]
    assert [e.job_id for e in store.list_pending(pool=DEFAULT)] == [plain]
    assert bell.pipelines == {light: "upload-digest", plain: "demo"}


class _Publisher:
    """Takes publishes (a Future-like answer), remembering their topics."""

    def __init__(self) -> None:
        self.topics: list[str] = []

    def publish(self, topic: str, data: bytes, timeout: float, **attrs: str) -> Any:
        self.topics.append(topic)
        return self

    def result(self, timeout: float) -> str:
        return "1"


def test_the_doorbell_rings_the_pipelines_pool_or_its_own_when_none_is_named(
    tmp_path: Path,
) -> None:
    s = pooled(tmp_path, pool="heavy")
    publisher = _Publisher()
    bell = Doorbell("p", "reclaim-jobs", publisher, pools=s.pools, home=s.pool)
    bell.ring("a", pipeline="upload-digest")
    bell.ring("b", pipeline="demo")
    bell.ring("c")
    assert bell.ring_many(["d", "e"], pipelines={"d": "webhook"}) == []
    assert publisher.topics == [
        "projects/p/topics/reclaim-jobs-light",
        "projects/p/topics/reclaim-jobs",
        "projects/p/topics/reclaim-jobs-heavy",
        "projects/p/topics/reclaim-jobs-heavy",
        "projects/p/topics/reclaim-jobs-heavy",
    ]


# --- the claim, the sweep, status


def _job(store: MemoryStore, s: Settings, pipeline: str, **fields: Any) -> str:
    job_id = records.new_job_id()
    payload = {"bucket": "b", "name": "n"} if pipeline == "upload-digest" else {}
    record = records.new_record(job_id, pipeline, payload, datetime.now(UTC))
    store.add_pending(job_id, pool=s.marker_pool(record))
    store.create({**record, **fields})
    return job_id


def test_a_delivery_to_the_wrong_pool_is_sent_on_and_not_run(tmp_path: Path) -> None:
    store, bell = MemoryStore(), Bell()
    s = pooled(tmp_path, pool="heavy")
    job_id = _job(store, s, "demo")  # the default pool's job, delivered to heavy
    before = store.read(job_id)
    outcome = handle(job_id, store, s, bell=bell)
    assert outcome.kind == OutcomeKind.REROUTED and not outcome.redeliver
    assert "runs in pool default, not heavy" in outcome.detail
    assert bell.rung == [job_id] and bell.pipelines == {job_id: "demo"}
    assert store.read(job_id) == before  # nothing written, no attempt spent


def test_a_failed_send_on_asks_for_the_push_again(tmp_path: Path) -> None:
    store = MemoryStore()
    s = pooled(tmp_path, pool="light")
    job_id = _job(store, s, "demo")
    outcome = handle(job_id, store, s, bell=Bell(fail=True))
    assert outcome.kind == OutcomeKind.REROUTED and outcome.redeliver


def test_a_delivery_to_the_right_pool_runs(tmp_path: Path) -> None:
    store = MemoryStore()
    s = pooled(tmp_path, pool="light")
    job_id = _job(store, s, "upload-digest")
    outcome = handle(job_id, store, s)
    assert outcome.kind != OutcomeKind.REROUTED
    assert store.read(job_id).record.get("attempts") == 1


def _silent_90s(tmp_path: Path) -> tuple[Clock, MemoryStore, Bell, Settings, str, str]:
    """A light job (stale after 60 s) and a default one (after 120 s), both running with
    an owner silent for 90 s."""
    clock = Clock()
    store, bell = MemoryStore(), Bell()
    s = pooled(tmp_path, stale_seconds=120.0)
    ago = (clock() - timedelta(seconds=90)).isoformat()
    running = {"status": "running", "attempts": 1, "owner": "gone", "updated_at": ago}
    light = _job(store, s, "upload-digest", **running)
    plain = _job(store, s, "demo", **running)
    return clock, store, bell, s, light, plain


def test_the_sweep_judges_each_job_by_its_pools_stale_time(tmp_path: Path) -> None:
    clock, store, bell, s, light, plain = _silent_90s(tmp_path)
    result = sweeper.run_once(context(store, bell, s, clock), clock())
    assert result.rescued == 1
    assert store.read(light).record["status"] == "queued"
    assert store.read(plain).record["status"] == "running"
    assert bell.pipelines == {light: "upload-digest"}
    assert store.list_pending(pool="light")[0].due is not None  # marked where it lives


def test_an_old_marker_of_a_moved_pipeline_is_rung_to_its_pool_then_removed(
    tmp_path: Path,
) -> None:
    store, bell = MemoryStore(), Bell()
    s = pooled(tmp_path)
    clock = Clock()
    job_id = records.new_job_id()
    old = clock() - timedelta(seconds=3600)  # queued long ago: its doorbell was lost
    record = records.new_record(job_id, "upload-digest", {"bucket": "b", "name": "n"}, old)
    store.put_object(store.bucket_name, f"pending/{job_id}", b"")  # from before pools
    store.create(record)
    sweeper.run_once(context(store, bell, s, clock), clock())
    assert bell.pipelines == {job_id: "upload-digest"}  # rung on light's topic
    current = store.read(job_id)
    done = {**current.record, "status": "done", "updated_at": clock().isoformat()}
    store.update(done, current.generation)  # light's claim finished it
    store.remove_pending(job_id, pool="light")  # ...and removed the marker where light keeps it
    assert [e.key for e in store.list_pending()] == [job_id]  # the old one is left
    assert store.list_pending()[0].legacy
    clock.advance(60)  # the next sweep run
    result = sweeper.run_once(context(store, bell, s, clock), clock())
    assert result.repaired == 1 and store.list_pending() == []


def test_a_status_read_judges_a_job_by_its_pools_stale_time(tmp_path: Path) -> None:
    clock, store, bell, s, light, plain = _silent_90s(tmp_path)
    queue = Queue(store, bell, s, clock=clock)
    assert queue.get(light).record["status"] == "queued"  # silent 90 s > light's 60 s
    assert queue.get(plain).record["status"] == "running"  # < the default pool's 120 s


def test_a_keys_limit_spans_pools(tmp_path: Path) -> None:
    """max_running 1 across two pools: while a light job holds its key's place, the
    heavy pool's job of the same key waits (shared.features.flow's places are not per pool)."""
    store = MemoryStore()
    seen: dict[str, Any] = {}
    path = write(tmp_path, {"pools": {"light": LIGHT, "heavy": HEAVY}})
    heavy_s = settings(pools_file=str(path), pool="heavy")
    keyed = {"concurrency_key": "customer-7", "max_running": 1}
    other = _job(store, heavy_s, "webhook", **keyed)

    def holder(ctx: Any) -> None:  # runs while this job holds the key's one place
        seen["other"] = handle(other, store, heavy_s)

    name = pipeline([("hold", holder)])
    doc = {"pools": {"light": {**LIGHT, "pipelines": [name]}, "heavy": HEAVY}}
    light_s = settings(pools_file=str(write(tmp_path, doc, "named.json")), pool="light")
    mine = _job(store, light_s, name, **keyed)
    outcome = handle(mine, store, light_s)
    assert outcome.kind == OutcomeKind.DONE
    assert seen["other"].kind == OutcomeKind.SKIPPED and "waiting" in seen["other"].detail
