"""daskgrad's page on the scheduler's dashboard (``/daskgrad``), its JSON twin (``/daskgrad/api.json``)
and the scheduler plugin that feeds both.

    dask scheduler --preload daskgrad.dashboard     # a CLI scheduler
    daskgrad.connect(...)                           # installs the plugin on any scheduler

It shows the graphs retained with ``retain_graph=True`` or forced by ``item()`` (their keys and bytes
per worker), the running backward's progress (tasks done / total, VJP rule outputs among them) and
the task-seconds of each VJP rule (``<op>-vjp``) in the last backward.  The scheduler cannot tell
which keys are retained graphs, so the client publishes them (``daskgrad.runtime.retain`` calls
:func:`publish_retained`); progress and times come from task transitions.
Heavy imports (bokeh) happen on the scheduler only.
"""
from __future__ import annotations

import itertools
import json
import logging
import operator
import threading
import time
import weakref
from collections import deque

from dask.utils import format_bytes, key_split


from .submit import current_client
from .internals import SchedulerPlugin

logger = logging.getLogger(__name__)
NAME = "daskgrad-dashboard"
TOPIC = "daskgrad-retained"
PAGE, API = "/daskgrad", "/daskgrad/api.json"


# ------------------------------------------------------------ client side: publish retained keys
_node_ids: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_next_id = itertools.count(1)
_outbox: dict = {}  # client id -> messages not yet sent; a key is present while a flush is pending
_lock = threading.Lock()


def publish_retained(owner, label="", keys=(), released: bool = False) -> None:
    """Tell the scheduler's daskgrad plugin that ``owner`` (a node, shown as ``label``) now pins the
    in-memory ``keys`` (or, ``released``, no longer pins any).

    Sent from the client's event loop, batched, so ``backward()`` never waits for it."""
    client = current_client()
    if client is None:
        return
    if released:
        if owner in _node_ids:
            _send(client, {"op": "release", "client": client.id, "id": _node_ids.pop(owner)})
        return
    if keys:
        nid = _node_ids.setdefault(owner, next(_next_id))
        _send(client, {"op": "retain", "client": client.id, "id": nid, "node": label, "keys": list(keys)})


def _send(client, msg):
    with _lock:
        box = _outbox.get(client.id)
        if box is not None:
            box.append(msg)
            return
        _outbox[client.id] = [msg]
    client.loop.add_callback(_flush, client)


async def _flush(client):
    while True:
        with _lock:
            batch = _outbox[client.id]
            if not batch:
                del _outbox[client.id]
                return
            _outbox[client.id] = []
        try:
            await client.scheduler.log_event(topic=TOPIC, msg=batch)
        except Exception as e:  # a closing client: the dashboard just misses these keys
            logger.info("daskgrad: could not publish retained keys to the scheduler: %r", e)


def install(client) -> None:
    """Register the plugin (and with it the page and the JSON route) on ``client``'s scheduler."""
    client.register_plugin(DaskgradPlugin())


def dask_setup(scheduler):
    """``dask scheduler --preload daskgrad.dashboard``."""
    scheduler.add_plugin(DaskgradPlugin(), idempotent=True)


# ------------------------------------------------------------ scheduler side
def _as_key(k):
    return tuple(_as_key(x) for x in k) if isinstance(k, list) else k


def _backward_span(scheduler, tasks):
    """The span (name "daskgrad/backward", and id) if ``tasks`` are a backward submission, else None.

    Blockwise fusion names a fused task after its last layer, so a rule whose output feeds another
    op runs under that op's name: the span, not the ``-vjp-`` names, says what backward submitted."""
    spans = getattr(scheduler.extensions.get("spans"), "spans", {})
    seen = set()
    for k in tasks:
        group = scheduler.tasks[k].group
        if id(group) in seen:
            continue
        seen.add(id(group))
        span = spans.get(getattr(group, "span_id", None))
        if span is not None and tuple(span.name[-2:]) == ("daskgrad", "backward"):  # maybe in a user's span
            return "/".join(span.name), span.id
    names = (k[0] if isinstance(k, tuple) else k for k in tasks)
    return ("(no span)", None) if any(isinstance(n, str) and "-vjp-" in n for n in names) else None


# what distributed itself meters while a task runs; the other labels of a fused task's seconds are
# the names of the parts daskgrad's fused tasks ran (calls._run_fused)
_WORKER_ACTIVITIES = {"thread-cpu", "thread-noncpu", "executor", "other", "offload", "deserialize",
                      "decompress", "disk-read", "disk-write", "serialize", "compress", "memory-read"}


def _parts(metrics):
    """{fused task prefix: {part name: seconds}} from a span's fine performance metrics."""
    out = {}
    for key, value in metrics.items():
        if len(key) == 4 and key[0] == "execute" and key[3] == "seconds" and key[2] not in _WORKER_ACTIVITIES:
            out.setdefault(key[1], {})[key[2]] = value
    return out


def _hands_on(ts) -> bool:
    """Whether the task only hands on one value of a fused group's result (:mod:`.fuse`)."""
    spec = ts.run_spec
    return (getattr(spec, "func", None) is operator.getitem and len(ts.dependencies) == 1
            and "-fused" in key_split(next(iter(ts.dependencies)).key))


class _Backward:
    """One backward submission: its tasks (VJP rules, and the forward values and sums they need)
    and the task-seconds of each task prefix."""

    def __init__(self, ident, client, span, span_id=None):
        self.id, self.client, self.span, self.span_id = ident, client, span, span_id
        self.started, self.finished = time.time(), None
        self.total = self.done = self.erred = self.cancelled = self.pending = 0
        self.vjp_total = self.vjp_done = 0
        self.prefixes: dict = {}

    def add(self, prefix):
        self.total += 1
        self.pending += 1
        self.vjp_total += prefix.endswith("-vjp")

    def finish(self, prefix, seconds=0.0, state="memory", handed_on=False):
        """``handed_on``: the task only picked one value out of a fused group's result (a rule's
        output under the rule's name): progress, but not a task the rule ran in, for the rule's
        work is metered inside the group (:meth:`as_dict`'s ``parts``) -- counted here as well, a
        rule's tasks would double once the workers' heartbeats bring those metrics."""
        if state == "memory":
            self.done += 1
            self.vjp_done += prefix.endswith("-vjp")
            if handed_on:
                prefix = "(handed on)"
            p = self.prefixes.setdefault(prefix, {"tasks": 0, "seconds": 0.0})
            p["tasks"] += 1
            p["seconds"] += seconds
        elif state == "erred":
            self.erred += 1
        else:
            self.cancelled += 1
        self.pending -= 1
        if self.pending == 0:
            self.finished = time.time()

    def as_dict(self, parts=None):
        """``parts``: the seconds of the parts inside fused tasks (:func:`_parts`), which replace
        those tasks' own rows: the rules inside are shown, each with the tasks it ran in."""
        prefixes = {k: dict(v) for k, v in self.prefixes.items()}
        for fused, inside in (parts or {}).items():
            if fused not in prefixes:
                continue
            tasks = prefixes.pop(fused)["tasks"]
            for name, seconds in inside.items():
                p = prefixes.setdefault(name, {"tasks": 0, "seconds": 0.0})
                p["tasks"] += tasks
                p["seconds"] += seconds
        prefixes = sorted(prefixes.items())
        rows = [{"name": k, "seconds": v["seconds"], "tasks": v["tasks"],
                 "kind": "rule" if k.endswith("-vjp") else "forward"} for k, v in prefixes]
        chart, folded = _fold(rows)
        return {"id": self.id, "span": self.span, "client": self.client, "started": self.started,
                "finished": self.finished, "running": self.pending > 0, "total": self.total,
                "done": self.done, "erred": self.erred, "cancelled": self.cancelled,
                "vjp_total": self.vjp_total, "vjp_done": self.vjp_done,
                "rules": {k: dict(v) for k, v in prefixes if k.endswith("-vjp")},
                "other": {k: dict(v) for k, v in prefixes if not k.endswith("-vjp")},
                "chart": chart, "folded": folded}


# a row of the chart that took less than this share of the largest row's seconds (or under a
# millisecond) is folded into one "others" row: a step has dozens of kinds of tasks that ran for ~0 s
FOLD_SHARE, FOLD_SECONDS = 0.01, 1e-3


def _fold(rows):
    """The chart's rows, largest first, and what was folded away: ``{"rows": n, "seconds": s}``."""
    rows = sorted(rows, key=lambda r: (-r["seconds"], r["name"]))
    top = rows[0]["seconds"] if rows else 0.0
    limit = max(FOLD_SECONDS, FOLD_SHARE * top)
    shown = [r for r in rows if r["seconds"] >= limit]
    rest = rows[len(shown):]
    return shown, {"rows": len(rest), "seconds": sum(r["seconds"] for r in rest),
                   "tasks": sum(r["tasks"] for r in rest)}


def short_key(key) -> str:
    """A key as the page shows it: its prefix and block index, ``exp (0,)`` for ``('exp-4b8c…', 0)``."""
    if isinstance(key, (tuple, list)) and key:
        return f"{key_split(key[0])} {tuple(key[1:])}"
    return key_split(key)


class DaskgradPlugin(SchedulerPlugin):
    name = NAME
    idempotent = True  # a second connect() (or the preload and connect()) keeps the first one

    def __init__(self):
        self.scheduler = None
        self.retained: dict = {}        # (client, node id) -> {"node": name, "keys": set}
        self._by_key: dict = {}         # retained key -> {(client, node id)}
        self.backwards: deque = deque(maxlen=20)
        self._pending: dict = {}        # backward task still to run -> [_Backward]
        self._ids = itertools.count(1)

    async def start(self, scheduler):
        self.scheduler = scheduler
        for _, batch in scheduler.get_events(TOPIC):  # published before the plugin came
            self.log_event(TOPIC, batch)
        if getattr(scheduler, "http_application", None) is not None:
            _serve(scheduler)

    # ---- retained graphs (published by clients)
    def log_event(self, topic, msg):
        if topic != TOPIC:
            return
        for m in msg:
            ident = (m["client"], m["id"])
            self._drop(ident)
            if m["op"] == "retain":
                keys = {k for k in map(_as_key, m["keys"]) if k in self.scheduler.tasks}
                if keys:
                    self.retained[ident] = {"node": m["node"], "keys": keys}
                    for k in keys:
                        self._by_key.setdefault(k, set()).add(ident)

    def _drop(self, ident):
        entry = self.retained.pop(ident, None)
        for k in entry["keys"] if entry else ():
            owners = self._by_key.get(k)
            owners.discard(ident)
            if not owners:
                del self._by_key[k]

    # ---- backward progress and rule times (observed)
    def update_graph(self, scheduler, *, client=None, tasks=(), **kwargs):
        span = _backward_span(scheduler, tasks)
        if span is None:
            return
        rec = _Backward(next(self._ids), client, *span)
        for k in tasks:
            ts = scheduler.tasks[k]
            prefix = key_split(k)
            rec.add(prefix)
            handed_on = _hands_on(ts)
            if ts.state in ("memory", "erred"):  # the same key from an earlier submission
                rec.finish(prefix, 0.0, ts.state, handed_on)
            else:
                self._pending.setdefault(k, []).append((rec, handed_on))
        if rec.pending == 0:
            rec.finished = rec.started
        self.backwards.append(rec)

    def transition(self, key, start, finish, *args, **kwargs):
        if finish == "forgotten" and key in self._by_key:
            for ident in list(self._by_key[key]):
                entry = self.retained[ident]
                entry["keys"].discard(key)
                if not entry["keys"]:
                    self._drop(ident)
            self._by_key.pop(key, None)
        if key not in self._pending or finish not in ("memory", "erred", "forgotten"):
            return
        seconds = sum(s["stop"] - s["start"] for s in kwargs.get("startstops") or ()
                      if s.get("action") == "compute")
        for rec, handed_on in self._pending.pop(key):
            rec.finish(key_split(key), seconds, finish, handed_on)

    # ---- what the page and the JSON route show
    def snapshot(self) -> dict:
        tasks = self.scheduler.tasks
        rows = []
        for (client, ident), entry in sorted(self.retained.items(), key=lambda kv: (kv[1]["node"], kv[0])):
            per_worker: dict = {}
            keys = [k for k in entry["keys"] if k in tasks and tasks[k].state == "memory"]
            for k in keys:
                ts = tasks[k]
                for ws in ts.who_has or ():
                    per_worker[ws.address] = per_worker.get(ws.address, 0) + ts.get_nbytes()
            rows.append({"node": entry["node"], "id": ident, "client": client, "keys": sorted(keys, key=str),
                         "nbytes": sum(per_worker.values()), "bytes": per_worker})
        history = [b.as_dict(self._fused_parts(b)) for b in self.backwards]
        return {"retained": rows, "retained_nbytes": sum(r["nbytes"] for r in rows),
                "backward": history[-1] if history else None, "history": history}

    def _fused_parts(self, backward):
        """What the workers metered inside the fused tasks of ``backward`` (its span's fine
        performance metrics; they arrive with the workers' heartbeats, a second or so late)."""
        spans = getattr(self.scheduler.extensions.get("spans"), "spans", {})
        span = spans.get(backward.span_id)
        return _parts(span.cumulative_worker_metrics) if span is not None else {}


# ------------------------------------------------------------ HTTP: JSON route and Bokeh page
def _serve(scheduler):
    """Add the JSON route and the page to a running scheduler's HTTP server (once)."""
    from distributed.http.utils import RequestHandler
    from tornado.ioloop import IOLoop

    app = scheduler.http_application
    if any(PAGE in getattr(a, "app_paths", ()) for a in app.applications):
        return

    class Api(RequestHandler):
        def get(self):
            plugin = self.server.plugins.get(NAME)
            self.set_header("Content-Type", "application/json")
            self.write(json.dumps(plugin.snapshot() if plugin else {"error": "plugin not installed"},
                                  default=str))

    app.add_handlers(r".*", [(API, Api, {"dask_server": scheduler})])
    from distributed.dashboard.core import BokehApplication
    from distributed.dashboard.scheduler import template_variables

    variables = template_variables(scheduler)
    if "daskgrad" not in variables["pages"]:
        variables["pages"].append("daskgrad")  # the dashboard's nav bar (shared by every page)
    bokeh_app = BokehApplication({PAGE: _page_doc}, scheduler, template_variables=variables)
    app.add_application(bokeh_app)
    bokeh_app.initialize(IOLoop.current())
    bokeh_app.start()


def _page_doc(scheduler, extra, doc):
    from distributed.dashboard.components import add_periodic_callback
    from distributed.dashboard.components.scheduler import BOKEH_THEME, env

    view = _View(scheduler)
    view.update()
    add_periodic_callback(doc, view, 500)
    doc.title = "Dask: daskgrad"
    doc.add_root(view.root)
    doc.template = env.get_template("simple.html")
    doc.template_variables.update(extra)
    doc.theme = BOKEH_THEME


class _View:
    """The page: progress of the running backward, task-seconds per VJP rule, retained graphs."""

    def __init__(self, scheduler):
        from bokeh.layouts import column
        from bokeh.models import (ColumnDataSource, DataTable, Div, FactorRange, HoverTool, HTMLTemplateFormatter,
                                  NumberFormatter, TableColumn)
        from bokeh.plotting import figure

        self.scheduler = scheduler
        self.title = Div(text="<h2>daskgrad</h2>", name="daskgrad-title")
        self.status = Div(name="daskgrad-progress")
        self.progress_src = ColumnDataSource({"y": ["tasks"] * 2, "right": [0, 0],
                                              "color": ["#dddddd", "#2ca02c"]})
        self.progress = figure(y_range=["tasks"], height=90, sizing_mode="stretch_width", tools="",
                               toolbar_location=None, title="Backward progress: tasks done / total")
        self.progress.hbar(y="y", right="right", height=0.6, color="color", source=self.progress_src)
        self.rules_src = ColumnDataSource({"rule": [], "seconds": [], "tasks": [], "color": [], "kind": []},
                                          name="daskgrad-rules")
        self.rules = figure(y_range=FactorRange(), height=220, sizing_mode="stretch_width", tools="",
                            toolbar_location=None, x_axis_label="seconds",
                            title="Where the last backward's time went: each VJP rule (blue) and forward op "
                                  "(grey) it ran, the work fused into one task shared out among them")
        self.rules.hbar(y="rule", right="seconds", height=0.7, color="color", source=self.rules_src)
        self.rules.add_tools(HoverTool(tooltips=[("", "@rule (@kind)"), ("seconds", "@seconds{0.000}"),
                                                 ("tasks", "@tasks")]))
        self.folded = Div(name="daskgrad-folded")
        self.retained_title = Div(name="daskgrad-retained")
        self.table_src = ColumnDataSource({c: [] for c in ("node", "nkeys", "nbytes", "workers", "keys", "full")})
        wrap = HTMLTemplateFormatter(template='<div title="<%= full %>" style="white-space: normal; '
                                              'line-height: 1.2">' '<%= value %></div>')
        columns = [TableColumn(field="node", title="node", width=140),
                   TableColumn(field="nkeys", title="keys", width=50),
                   TableColumn(field="nbytes", title="bytes", formatter=NumberFormatter(format="0.0 b"), width=80),
                   TableColumn(field="workers", title="bytes per worker",
                               formatter=HTMLTemplateFormatter(template='<div style="white-space: normal; '
                                                                        'line-height: 1.2"><%= value %></div>'),
                               width=360),
                   TableColumn(field="keys", title="keys (prefix and block; hover for the full keys)",
                               formatter=wrap, width=480)]
        self.table = DataTable(source=self.table_src, columns=columns, height=240, sizing_mode="stretch_width",
                               index_position=None, row_height=44, name="daskgrad-table")
        self.root = column(self.title, self.status, self.progress, self.rules, self.folded, self.retained_title,
                           self.table, sizing_mode="stretch_width")

    def update(self):
        plugin = self.scheduler.plugins.get(NAME)
        if plugin is None:
            self.status.text = "The daskgrad plugin is not installed on this scheduler."
            return
        snap = plugin.snapshot()
        b = snap["backward"]
        if b is None:
            self.status.text = "No backward has run yet."
        else:
            state = "running" if b["running"] else "finished"
            self.status.text = (f"<b>Backward {b['id']}</b> ({b['span']}, {state}): "
                                f"<b>{b['done']} / {b['total']}</b> tasks done, of which "
                                f"<b>{b['vjp_done']} / {b['vjp_total']}</b> VJP rule outputs"
                                + (f", {b['erred']} erred" if b["erred"] else ""))
            self.progress_src.data = {"y": ["tasks"] * 2, "right": [b["total"], b["done"]],
                                      "color": ["#dddddd", "#2ca02c"]}
            chart = b["chart"][::-1]  # (bokeh draws the first factor at the bottom: the largest on top)
            names = [r["name"] for r in chart]
            self.rules.y_range.factors = names
            self.rules.height = 80 + 28 * max(len(names), 3)
            self.rules_src.data = {"rule": names, "seconds": [r["seconds"] for r in chart],
                                   "tasks": [r["tasks"] for r in chart],
                                   "kind": ["VJP rule" if r["kind"] == "rule" else "forward op" for r in chart],
                                   "color": ["#1f77b4" if r["kind"] == "rule" else "#aaaaaa" for r in chart]}
            f = b["folded"]
            self.folded.text = (f"{f['rows']} more kinds of task ran for about no time "
                                f"({f['seconds']:.3f} s in {f['tasks']} tasks together), not drawn"
                                if f["rows"] else "")
        rows = snap["retained"]
        self.retained_title.text = (f"<h3>Retained graphs: {len(rows)} nodes, "
                                    f"{format_bytes(snap['retained_nbytes'])}</h3>")
        self.table_src.data = {
            "node": [r["node"] for r in rows], "nkeys": [len(r["keys"]) for r in rows],
            "nbytes": [r["nbytes"] for r in rows],
            "workers": [", ".join(f"{w}: {format_bytes(n)}" for w, n in sorted(r["bytes"].items())) for r in rows],
            "keys": [", ".join(short_key(k) for k in r["keys"][:6]) + (f" and {len(r['keys']) - 6} more"
                                                                     if len(r["keys"]) > 6 else "") for r in rows],
            "full": [_html_escape(", ".join(map(str, r["keys"]))) for r in rows]}


def _html_escape(text):
    return text.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;").replace(">", "&gt;")
