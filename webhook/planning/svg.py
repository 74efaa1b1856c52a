"""SVG drawing of a placement: the topology tree (zone, block, rack, node) with each placed pod
as a square coloured by segment, so a person sees at a glance whether segments stayed in their
racks. Plain SVG text; only domains that hold pods of the workload are drawn, the others are
counted ("+ 5 other racks": they hold no pod of this workload)."""

from __future__ import annotations

import textwrap
from html import escape
from typing import Any

from webhook.kube.core import HOSTNAME
from webhook.placement.engine import ClusterIndex, Placement

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf",
           "#bcbd22", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd", "#e6550d")
OTHER = "#7f7f7f"
SQ, GAP, PAD, HEAD = 10, 2, 6, 16
#: Characters per line of a wrapped "not placed" reason, and the width allowed per character
#: (px, 12 px sans-serif; generous, so no line is clipped).
REASON_COLUMNS, REASON_CHAR_WIDTH = 100, 7


def _colour(key: tuple[Any, ...] | None) -> str:
    if key is None:
        return OTHER
    g, i = key
    return PALETTE[(i + 7 * g) % len(PALETTE)]


def render(index: ClusterIndex, placement: Placement, title: str = "") -> str:
    """Return an SVG document (str) of ``placement`` on ``index``.

    Each pod is a square in its node's row, coloured by ``(group, segment index)``; pods outside
    segments are grey. Domains are nested boxes labelled ``level=value``. Raises nothing; an
    unplaced result draws only the title and the reason.
    """
    seg_of, pods_on = _pods_by_node(index, placement)
    # the leaf row is the node; a lowest level of kubernetes.io/hostname is the node itself
    k = index.node_depth - 1 if index.levels and index.levels[-1] == HOSTNAME else index.node_depth
    # tree of used domains: dict path-of-ids -> children
    used = sorted(pods_on)
    out: list[str] = []
    width_needed = [0]

    def subtree(depth: int, dom_id: int, x: int, y: int) -> tuple[int, int]:
        """Draw domain ``dom_id`` of ``depth`` at (x, y); return its (w, h)."""
        if depth == k:  # a node row
            n = int(index.starts[depth][dom_id])
            pods = pods_on.get(n, [])
            label = index.node_names[n]
            w = max(len(label) * 6 + 10, PAD * 2 + len(pods) * (SQ + GAP))
            out.append(f'<rect x="{x}" y="{y}" width="{w}" height="{HEAD + SQ + PAD}" fill="#f7f7f7" stroke="#999"/>')
            out.append(f'<text x="{x + 4}" y="{y + 12}" font-size="10">{escape(label)}</text>')
            for i, p in enumerate(pods):
                seg = seg_of.get(p)
                tip = escape(f"{p} → segment {seg[1]}" if seg else f"{p} (no segment)")
                out.append(f'<rect x="{x + PAD + i * (SQ + GAP)}" y="{y + HEAD}" width="{SQ}" height="{SQ}" '
                           f'fill="{_colour(seg)}"><title>{tip}</title></rect>')
            return w, HEAD + SQ + PAD
        children = sorted({int(index.dom[depth + 1][n]) for n in used if int(index.dom[depth][n]) == dom_id})
        all_children = {int(index.dom[depth + 1][n]) for n in range(int(index.starts[depth][dom_id]),
                        int(index.starts[depth][dom_id + 1]) if dom_id + 1 < len(index.starts[depth]) else index.n)}
        idle = len(all_children) - len(children)
        vertical = depth + 1 == k or depth == 0  # nodes stacked in their rack, zones stacked
        cx, cy = x + PAD, y + HEAD + 2
        w_max, h_max = 0, 0
        for c in children:
            w, h = subtree(depth + 1, c, cx, cy)
            if vertical:
                cy += h + GAP
                w_max = max(w_max, w)
            else:
                cx += w + PAD
                h_max = max(h_max, h)
        if vertical:
            inner_w, inner_h = w_max, cy - (y + HEAD + 2)
        else:
            inner_w, inner_h = cx - (x + PAD) - PAD, h_max
        name = "node" if depth + 1 == k else index.level_name(depth + 1).split("/")[-1].replace("topology-", "")
        note = f"+ {idle} other {name}{'s' if idle != 1 else ''}" if idle else ""
        label = "cluster" if depth == 0 else f"{index.names[depth][dom_id]}"
        w = max(inner_w + 2 * PAD, len(label) * 7 + len(note) * 6 + 20)
        h = inner_h + HEAD + PAD + 2
        fill = "#ffffff" if depth % 2 else "#eef3fb"
        out.insert(0, "")  # placeholder keeps drawing order: boxes below their children
        out[0] = (f'<rect x="{x}" y="{y}" width="{w}" height="{h}" fill="{fill}" stroke="#446" rx="3"/>'
                  f'<text x="{x + 4}" y="{y + 12}" font-size="11" font-weight="bold">{escape(label)}</text>'
                  + (f'<text x="{x + w - 4}" y="{y + 12}" font-size="10" text-anchor="end" fill="#555">{escape(note)}</text>' if note else ""))
        width_needed[0] = max(width_needed[0], x + w)
        return w, h

    top = 40
    if placement.placed and used:
        w, h = subtree(0, 0, 10, top)
    else:
        w, h = _reason(placement, top, out)
    legend_y = top + h + 20
    legend, lx = _legend(placement, seg_of, legend_y)
    total_w = max(w + 20, lx + 10, 400)
    total_h = legend_y + 30
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{total_w}" height="{total_h}" '
            f'viewBox="0 0 {total_w} {total_h}" font-family="sans-serif">'
            f'<rect width="100%" height="100%" fill="white"/>'
            f'<text x="10" y="22" font-size="14" font-weight="bold">{escape(title)}</text>')
    return head + "".join(out) + "".join(legend) + "</svg>\n"


def _reason(placement: Placement, top: int, out: list[str]) -> tuple[int, int]:
    """Draw an unplaced result's reason into ``out`` below ``top``: wrapped into lines, the drawing
    sized to hold them. Returns its (width, height)."""
    lines = textwrap.wrap(f"not placed: {placement.reason or ''}", REASON_COLUMNS) or ["not placed"]
    w = max(600, max(len(line) for line in lines) * REASON_CHAR_WIDTH + 20)
    h = 16 * len(lines) + 4
    for i, line in enumerate(lines):
        out.append(f'<text x="10" y="{top + 14 + 16 * i}" font-size="12">{escape(line)}</text>')
    return w, h


def _legend(placement: Placement, seg_of: dict[str, tuple[Any, ...] | None], legend_y: int) -> tuple[list[str], int]:
    """The legend at ``legend_y``: one swatch per segment (the first 32), and "no segment" when a
    pod is in none. Returns its SVG elements and the x after the last one."""
    segs = sorted({(s.group, s.index) for s in placement.segments})
    lx = 10
    legend = []
    for g, i in segs[:32]:
        legend.append(f'<rect x="{lx}" y="{legend_y}" width="{SQ}" height="{SQ}" fill="{_colour((g, i))}"/>'
                      f'<text x="{lx + SQ + 3}" y="{legend_y + 9}" font-size="10">seg {i}{f" (g{g})" if g else ""}</text>')
        lx += 70
    if any(seg_of.get(p) is None for p in placement.assignments):
        legend.append(f'<rect x="{lx}" y="{legend_y}" width="{SQ}" height="{SQ}" fill="{OTHER}"/>'
                      f'<text x="{lx + SQ + 3}" y="{legend_y + 9}" font-size="10">no segment</text>')
        lx += 80
    return legend, lx


def _pods_by_node(index: ClusterIndex, placement: Placement,
                  ) -> tuple[dict[str, tuple[Any, ...] | None], dict[int, list[str]]]:
    """Each pod's ``(group, segment index)``, and the pods of each node position, in segment order."""
    seg_of: dict[str, tuple[Any, ...] | None] = {}
    for s in placement.segments:
        for p in s.pods:
            seg_of[p] = (s.group, s.index)
    pods_on: dict[int, list[str]] = {}
    for pod, node in placement.assignments.items():
        pods_on.setdefault(index.node_pos[node], []).append(pod)
    for v in pods_on.values():
        v.sort(key=lambda p: (seg_of.get(p) or (-1, -1), p))
    return seg_of, pods_on
