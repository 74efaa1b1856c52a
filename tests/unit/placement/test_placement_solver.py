"""The engine against an exact reference solver (OR-Tools CP-SAT) on random HETEROGENEOUS instances.

Every instance family of issue 8 is drawn, and those of the §3b kinds of issue 18 (a JobSet's
pods indexed ``job-index × parallelism + completion-index``, a multi-host Ray group's
``replica × numOfHosts + host``, an MPIJob's launcher-as-worker in segment 0 with other requests
than its workers; a TrainJob adds no shape: its gang is a one-Job JobSet's, pod for pod,
``tests/unit/placement/test_placement_kind_families.py``): a PyTorchJob Master or an LWS leader with other
requests, node selector, required node affinity (every operator, matchFields on
``metadata.name``) and tolerations than the workers; LWS LeaderWorker (leader inside segment 0)
and LeaderExcluded (leader outside segments); partial last segments; unsegmented gangs; taints,
cordoned nodes, several resources (GPU, CPU, memory, pods) and bound pods (free < allocatable,
sometimes over-committed). For each instance the test checks, with its own independent
implementation of the rules (eligibility, capacity, required levels) and of the objective:

* the engine never breaks a hard rule;
* it places whenever CP-SAT proves a placement exists, and never when CP-SAT proves none;
* its objective — workload depth, segment vector ``(n(sp) … n(sr+1))``, workload packing,
  segment packing (DESIGN.md §8 order) — equals CP-SAT's optimum on at least 99% of the
  feasible instances; the share and every miss are printed.

The default run draws 500 instances; ``pytest -m slow`` runs 2,000 more.
"""

from __future__ import annotations

import random

import pytest
from ortools.sat.python import cp_model

from tests.support.placement_helpers import BLOCK, HOST, RACK, ZONE, node
from webhook.placement.engine import ClusterIndex, Gang, PodRequest, place
from webhook.topology.objects import Topology

GPU, CPU, MEM = "nvidia.com/gpu", "cpu", "memory"
GIB = 2**30 * 1000
SEED = 20261201


# ---------------------------------------------------------------------------------------------
# independent rules (not the engine's code)
def _toleration_matches(tol: dict, taint: tuple) -> bool:
    key, value, effect = taint
    if tol.get("effect") and tol["effect"] != effect:
        return False
    if not tol.get("key"):
        return tol.get("operator") == "Exists"
    if tol["key"] != key:
        return False
    return tol.get("operator") == "Exists" or tol.get("value", "") == value


def _requirement(value, op: str, values: tuple) -> bool:
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if value is None:
        return False
    try:
        v = int(value)
    except ValueError:
        return False
    return v > int(values[0]) if op == "Gt" else v < int(values[0])


def eligible(n, pod: PodRequest) -> bool:
    if n.unschedulable or not n.ready:
        return False
    tols = [dict(t) for t in pod.tolerations]
    if not all(any(_toleration_matches(t, taint) for t in tols) for taint in n.taints):
        return False
    if any(n.labels.get(k) != v for k, v in pod.node_selector):
        return False
    if pod.node_affinity is not None:
        def term_ok(term):
            exprs, fields = term
            if not exprs and not fields:
                return False
            return all(_requirement(n.labels.get(k), op, v) for k, op, v in exprs) and \
                all(_requirement(n.name, op, v) for k, op, v in fields)
        if not any(term_ok(t) for t in pod.node_affinity):
            return False
    return True


def depth_shared(by_name: dict, names: list[str], levels: tuple) -> int:
    depth = 0
    for i, lv in enumerate(levels, 1):
        if len({by_name[n].labels[lv] for n in names}) == 1:
            depth = i
        else:
            break
    if depth == len(levels) and len(set(names)) == 1 and levels[-1] != HOST:
        depth += 1  # one node: the implicit node level
    return depth


# ---------------------------------------------------------------------------------------------
# instances
OPS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")


def random_affinity(rng: random.Random, names: list[str]):
    terms: list[tuple] = []
    for _ in range(rng.choice([1, 1, 2])):
        exprs: list[tuple] = []
        fields: list[tuple] = []
        for _ in range(rng.choice([1, 1, 2])):
            op = rng.choice(OPS + ("field",))
            if op == "field":
                fields.append(("metadata.name", rng.choice(["In", "NotIn"]), tuple(rng.sample(names, min(len(names), rng.randint(1, 4))))))
            elif op in ("In", "NotIn"):
                exprs.append(("gpu-type", op, (rng.choice(["a100", "h100"]),)))
            elif op in ("Exists", "DoesNotExist"):
                exprs.append((rng.choice(["gen", "fast"]), op, ()))
            else:
                exprs.append(("gen", op, (str(rng.randint(1, 4)),)))
        terms.append((tuple(exprs), tuple(fields)))
    return tuple(terms)


def random_constraints(rng, names):
    sel: tuple = ()
    aff = None
    tol: tuple = ()
    r = rng.random()
    if r < 0.15:
        sel = (("pool", rng.choice(["cpu", "gpu"])),)
    elif r < 0.45:
        aff = random_affinity(rng, names)
    if rng.random() < 0.5:
        tol = (((("effect", "NoSchedule"), ("key", "dedicated"), ("operator", "Equal"), ("value", "train"))),)
        tol = tuple(tuple(sorted(dict(t).items())) for t in tol)
    return sel, aff, tol


def make_instance(rng: random.Random) -> dict:
    levels = (ZONE, BLOCK, RACK, HOST) if rng.random() < 0.5 else (ZONE, BLOCK, RACK)
    nodes: list = []
    for z in range(rng.randint(1, 2)):
        for b in range(rng.randint(1, 3)):
            for r in range(rng.randint(1, 3)):
                for k in range(rng.randint(1, 4)):
                    if len(nodes) >= 24:
                        break
                    nd = node(f"n-{z}-{b}-{r}-{k}", f"z{z}", f"b{z}{b}", f"r{z}{b}{r}",
                              **{GPU: 8000, CPU: 64000, MEM: 512 * GIB, "pods": 110_000})
                    nd.labels["gpu-type"] = rng.choice(["a100", "h100"])
                    if rng.random() < 0.7:
                        nd.labels["gen"] = str(rng.randint(1, 4))
                    if rng.random() < 0.3:
                        nd.labels["fast"] = "true"
                    if rng.random() < 0.3:
                        nd.labels["pool"] = rng.choice(["cpu", "gpu"])
                    # bound pods' requests (sometimes over-committing cpu)
                    nd.free[GPU] -= rng.choice([0, 0, 0, 0, 1, 2, 4, 6, 7, 8]) * 1000
                    nd.free[CPU] -= rng.choice([0, 0, 8000, 32000, 32000, 60000, 70000])
                    nd.free[MEM] -= rng.choice([0, 0, 0, 256, 448]) * GIB
                    nd.free["pods"] -= rng.choice([0, 0, 10_000, 10_000, 107_000])
                    nd.unschedulable = rng.random() < 0.05
                    if rng.random() < 0.15:
                        nd.taints = (("dedicated", "train", "NoSchedule"),)
                    nodes.append(nd)
    names = [n.name for n in nodes]
    family = rng.choice(["pytorch", "lws-leader-worker", "lws-leader-excluded", "unsegmented",
                         "jobset", "ray-multihost", "mpi-launcher-as-worker"])
    S = rng.choice([2, 2, 3, 4])
    gpu = rng.choice([1, 1, 2, 4])
    w_req = {GPU: gpu * 1000, CPU: rng.choice([1000, 4000, 8000]), MEM: rng.choice([8, 64]) * GIB, "pods": 1000}
    w_sel, w_aff, w_tol = random_constraints(rng, names) if rng.random() < 0.5 else ((), None, ())
    pods = []

    def worker(name, segment):
        return PodRequest(f"ns/{name}", w_req, segment=segment, tolerations=w_tol, node_selector=w_sel,
                          node_affinity=w_aff, role="worker")

    def special(name, segment, role):
        req = {GPU: rng.choice([0, 1, 2]) * 1000, CPU: rng.choice([2000, 16000, 48000]), MEM: rng.choice([4, 128]) * GIB,
               "pods": 1000}
        sel, aff, tol = random_constraints(rng, names)
        return PodRequest(f"ns/{name}", req, segment=segment, tolerations=tol, node_selector=sel, node_affinity=aff, role=role)

    if family == "pytorch":
        workers = rng.randint(S, 3 * S + S - 1)  # often a partial last segment
        if rng.random() < 0.6:
            pods.append(special("job-master-0", None, "master"))
        pods += [worker(f"job-worker-{i}", (0, i // S)) for i in range(workers)]
    elif family.startswith("lws"):
        excluded = family == "lws-leader-excluded"
        groups = rng.randint(1, 3)
        size = groups * S + 1 if (excluded or rng.random() < 0.5) else groups * S
        pods.append(special("lws-0", None if excluded else (0, 0), "leader"))
        for w in range(1, size):
            seg = (w - 1) // S if (size - 1) % S == 0 and size % S != 0 else w // S
            pods.append(worker(f"lws-0-{w}", (0, seg)))
    elif family == "jobset":
        # DESIGN.md §3b: pod (job j, completion c) has index j × parallelism + c; parallelism a
        # multiple or a divisor of S (KAI's one-Job case), or neither (segments straddle Jobs)
        parallelism = rng.choice([S, 2 * S, 1, 3])
        jobs = rng.randint(max(1, S // parallelism), max(1, (4 * S) // parallelism + 1))
        pods += [worker(f"js-workers-{j}-{c}", (0, (j * parallelism + c) // S))
                 for j in range(jobs) for c in range(parallelism)]
    elif family == "ray-multihost":
        # DESIGN.md §3b: index replica × numOfHosts + host; S a multiple of numOfHosts (whole replicas)
        hosts = rng.choice([h for h in (1, 2, 4) if S % h == 0])
        replicas = rng.randint(max(1, S // hosts), max(1, (4 * S) // hosts))
        pods += [worker(f"ray-gpu-worker-{r}-{h}", (0, (r * hosts + h) // S)) for r in range(replicas) for h in range(hosts)]
    elif family == "mpi-launcher-as-worker":
        # DESIGN.md §3b: the launcher is hostfile position 0 (segment 0), worker i is position i + 1
        workers = rng.randint(S, 4 * S)
        pods.append(special("mpi-launcher", (0, 0), "launcher"))
        pods += [worker(f"mpi-worker-{i}", (0, (i + 1) // S)) for i in range(workers)]
    else:
        pods += [worker(f"job-worker-{i}", None) for i in range(rng.randint(1, 8))]
        if rng.random() < 0.5:
            pods.append(special("job-master-0", None, "master"))
    depths = list(range(1, len(levels) + 1))

    def pick_pair(broadest: int = 1):
        req = rng.choice([None] + [d for d in depths if d >= broadest])
        lo = req or 1
        deeper = [d for d in depths if d > lo]
        if deeper and rng.random() < 0.7:
            return req, rng.choice(deeper)
        return req, rng.choice([None] + [d for d in depths if d >= lo])

    wreq, wpref = pick_pair()
    sreq, spref = pick_pair(wreq or 1)
    segmented = any(p.segment is not None for p in pods)
    if not segmented:
        sreq = spref = None
    return {"family": family, "levels": levels, "nodes": nodes, "pods": pods, "wreq": wreq, "wpref": wpref, "sreq": sreq, "spref": spref}


def gang_of(inst: dict) -> Gang:
    lv = inst["levels"]
    name = lambda d: lv[d - 1] if d else None  # noqa: E731
    return Gang(inst["pods"], workload_required=name(inst["wreq"]), workload_preferred=name(inst["wpref"]),
                segment_required=name(inst["sreq"]), segment_preferred=name(inst["spref"]))


def _depths(inst):
    wr, sr = inst["wreq"] or 0, inst["sreq"] or 0
    return wr, inst["wpref"] or wr, sr, inst["spref"] or sr


def segments_of(inst) -> dict:
    out: dict[tuple, list[str]] = {}
    for p in inst["pods"]:
        if p.segment is not None:
            out.setdefault(p.segment, []).append(p.key)
    return out


def domain_key(n, levels, depth: int) -> tuple:
    return tuple(n.labels[lv] for lv in levels[:depth])


def objective_of(inst: dict, assign: dict[str, str]) -> tuple:
    """(workload depth, (n(sp) … n(sr+1)), -workload packing, -segment packing), to maximise."""
    by = {n.name: n for n in inst["nodes"]}
    lv = inst["levels"]
    wr, wp, sr, sp = _depths(inst)
    wd = min(depth_shared(by, list(assign.values()), lv), wp)
    seg_depth, spack = [], 0
    for pods in segments_of(inst).values():
        names = [assign[p] for p in pods]
        d = depth_shared(by, names, lv)
        seg_depth.append(d)
        if d < sp:
            spack += len({domain_key(by[n], lv, sp) for n in names}) - 1
    vector = tuple(sum(1 for d in seg_depth if d >= L) for L in range(sp, sr, -1))
    wpack = len({domain_key(by[n], lv, wp) for n in assign.values()}) - 1 if wd < wp else 0
    return wd, vector, -wpack, -spack


def check_valid(inst: dict, assign: dict[str, str]) -> None:
    by = {n.name: n for n in inst["nodes"]}
    pods = {p.key: p for p in inst["pods"]}
    assert set(assign) == set(pods)
    used: dict[tuple, int] = {}
    for key, n in assign.items():
        assert eligible(by[n], pods[key]), f"{key} on {n}, which it may not use"
        for r, v in pods[key].requests.items():
            used[n, r] = used.get((n, r), 0) + v
    for (n, r), v in used.items():
        assert v == 0 or v <= by[n].free[r], f"node {n} over capacity on {r}: {v} > {by[n].free[r]}"
    lv = inst["levels"]
    wr, _, sr, _ = _depths(inst)
    assert depth_shared(by, list(assign.values()), lv) >= wr, "workload required level broken"
    for sid, keys in segments_of(inst).items():
        assert depth_shared(by, [assign[k] for k in keys], lv) >= sr, f"segment {sid} breaks its required level"


# ---------------------------------------------------------------------------------------------
# CP-SAT
def solve(inst: dict):
    """CP-SAT's lexicographic optimum: ``("optimal", assignment)``, ``("infeasible", None)`` or
    ``("unknown", None)`` (time limit)."""
    nodes, pods, lv = inst["nodes"], inst["pods"], inst["levels"]
    wr, wp, sr, sp = _depths(inst)
    m = cp_model.CpModel()
    x = {}
    for i, p in enumerate(pods):
        options = []
        for j, n in enumerate(nodes):
            if eligible(n, p):
                x[i, j] = m.new_bool_var(f"x{i}_{j}")
                options.append(x[i, j])
        if not options:
            return "infeasible", None
        m.add_exactly_one(options)
    for j, n in enumerate(nodes):
        for r in (GPU, CPU, MEM, "pods"):
            terms = [(p.requests.get(r, 0), x[i, j]) for i, p in enumerate(pods) if (i, j) in x and p.requests.get(r, 0)]
            if terms:
                m.add(sum(q * v for q, v in terms) <= max(n.free[r], 0))

    def domains(depth):
        ids: dict[tuple, int] = {}
        return [ids.setdefault(domain_key(n, lv, depth) if depth <= len(lv) else (n.name,), len(ids)) for n in nodes]

    def used_domains(depth, members, tag):
        dom = domains(depth)
        u = [m.new_bool_var(f"{tag}_{k}") for k in range(max(dom) + 1)]
        for i in members:
            for j in range(len(nodes)):
                if (i, j) in x:
                    m.add_implication(x[i, j], u[dom[j]])
        return u

    everyone = list(range(len(pods)))
    wmeet = []
    for d in range(max(wr, 1), wp + 1):
        u = used_domains(d, everyone, f"w{d}")
        if d <= wr:
            m.add(sum(u) == 1)
        else:
            meet = m.new_bool_var(f"wm{d}")
            m.add(sum(u) <= 1).only_enforce_if(meet)
            wmeet.append(meet)
    key_of = {p.key: i for i, p in enumerate(pods)}
    segs = [[key_of[k] for k in keys] for keys in segments_of(inst).values()]
    smeet: dict[int, list] = {}
    spack_terms = []
    for g, members in enumerate(segs):
        for d in range(max(sr, 1), sp + 1):
            u = used_domains(d, members, f"s{g}_{d}")
            if d <= sr:
                m.add(sum(u) == 1)
            else:
                meet = m.new_bool_var(f"sm{g}_{d}")
                m.add(sum(u) <= 1).only_enforce_if(meet)
                smeet.setdefault(d, []).append(meet)
            if d == sp and sp > sr:
                spack_terms.append(sum(u) - 1)
    wpack = 0
    if wp > wr:
        wpack = sum(used_domains(wp, everyone, "wp")) - 1
    # lexicographic weights, least significant first
    G = len(segs)
    weight = 1
    objective = -sum(spack_terms) * weight if spack_terms else 0
    weight *= G * len(nodes) + 1
    objective += -wpack * weight
    weight *= len(nodes) + 1
    for d in range(sr + 1, sp + 1):  # n(sr+1) least significant … n(sp) most
        if d in smeet:
            objective += sum(smeet[d]) * weight
        weight *= G + 1
    objective += sum(wmeet) * weight
    m.maximize(objective)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.max_time_in_seconds = 10.0
    solver.parameters.random_seed = 7
    status = solver.solve(m)
    if status == cp_model.INFEASIBLE:
        return "infeasible", None
    if status != cp_model.OPTIMAL:
        return "unknown", None
    assign = {}
    for (i, j), v in x.items():
        if solver.value(v):
            assign[pods[i].key] = nodes[j].name
    return "optimal", assign


# ---------------------------------------------------------------------------------------------
def run_instances(count: int, seed: int) -> None:
    rng = random.Random(seed)
    stats = {"instances": 0, "feasible": 0, "infeasible": 0, "unknown": 0, "optimal": 0, "missed_feasible": 0, "nontrivial": 0,
                 "inexact": 0}
    families: dict[str, int] = {}
    misses: list[tuple] = []
    for k in range(count):
        inst = make_instance(rng)
        families[inst["family"]] = families.get(inst["family"], 0) + 1
        res = place(ClusterIndex(inst["nodes"], Topology("t", inst["levels"])), gang_of(inst))
        stats["instances"] += 1
        stats["inexact"] += not res.exact
        if res.placed:
            check_valid(inst, res.assignments)
        status, best_assign = solve(inst)
        if status == "unknown":
            stats["unknown"] += 1
            continue
        if status == "infeasible":
            stats["infeasible"] += 1
            assert not res.placed, f"instance {k}: engine placed a gang CP-SAT proves infeasible"
            continue
        stats["feasible"] += 1
        check_valid(inst, best_assign)
        best = objective_of(inst, best_assign)
        if not res.placed:
            stats["missed_feasible"] += 1
            misses.append((k, inst["family"], "not placed", res.reason))
            continue
        wr, wp, sr, sp = _depths(inst)
        ideal = (wp, tuple(len(segments_of(inst)) for _ in range(sp, sr, -1)), 0, 0)
        stats["nontrivial"] += best != ideal
        got = objective_of(inst, res.assignments)
        assert got <= best, f"instance {k}: engine {got} beats the solver optimum {best}: solver model bug"
        if got == best:
            stats["optimal"] += 1
        else:
            assert not res.exact, f"instance {k}: engine claims exact with {got}, optimum {best}"
            misses.append((k, inst["family"], got, best))
    share = stats["optimal"] / max(1, stats["feasible"])
    report = f"placement vs CP-SAT: {stats}; families {families}; optimal share {share:.4f}; misses {misses}"
    print(report)
    assert stats["missed_feasible"] == 0, report
    assert stats["unknown"] <= count // 100, report
    assert stats["feasible"] >= count * 2 // 5, report
    assert stats["nontrivial"] >= count // 10, report
    assert min(families.values()) >= count // 10, report
    assert share >= 0.99, report


def test_engine_matches_cp_sat_on_200_heterogeneous_instances():
    """The default run's share of the comparison: the first 200 instances of the seed (the 500
    below and the 2,000 after them run under ``-m slow``; docs/decisions/default-suite-time.md)."""
    run_instances(200, SEED)


@pytest.mark.slow
def test_engine_matches_cp_sat_on_500_heterogeneous_instances():
    run_instances(500, SEED)


@pytest.mark.slow
def test_engine_matches_cp_sat_on_2000_more_instances():
    run_instances(2000, SEED + 1)
