/* tools/report/svg.c — SVG plots (see svg.h). */
#include "svg.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "svg_layout.h"

static const double MIB = 1024.0 * 1024.0;

static void esc(util_str *o, const char *s) {
    for (; s && *s; s++) {
        switch (*s) {
        case '&': util_str_printf(o, "&amp;"); break;
        case '<': util_str_printf(o, "&lt;"); break;
        case '>': util_str_printf(o, "&gt;"); break;
        case '"': util_str_printf(o, "&quot;"); break;
        default: util_str_printf(o, "%c", *s);
        }
    }
}

static bool write_file(const char *path, util_str *o) {
    bool ok = !o->oom;
    FILE *f = ok ? fopen(path, "w") : NULL;
    if (!f) ok = false;
    if (f) {
        ok = fwrite(o->s, 1, o->len, f) == o->len;
        ok = (fclose(f) == 0) && ok;
    }
    util_str_free(o);
    return ok;
}

/* A "nice" tick step for a range: 1, 2 or 5 times a power of ten. */
static double nice_step(double range, int target) {
    if (range <= 0) return 1;
    double raw = range / target, p = pow(10, floor(log10(raw))), m = raw / p;
    return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

static const char *phase_color(phase p) {
    switch (p) {
    case PH_FORWARD: return "#dbeafe";
    case PH_BACKWARD: return "#ffedd5";
    case PH_RECOMPUTE: return "#fca5a5";
    case PH_OPTIMIZER: return "#dcfce7";
    default: return "#f3f4f6";
    }
}

static void header(util_str *o, double w, double h) {
    util_str_printf(o,
                    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                    "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                    "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"12\">\n"
                    "<rect x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"white\"/>\n",
                    w, h, w, h, w, h);
}

/* Shaded phase intervals of one trace inside a panel: top-level phases
 * first, recomputation (nested in backward) on top of them. */
static void bands(util_str *o, const trace *tr, double x0, double y0, double pw, double ph,
                  double tmax) {
    for (int pass = 0; pass < 2; pass++) {
        double start = -1;
        int depth = 0;
        phase top = PH_OTHER;
        for (size_t i = 0; i < tr->ns; i++) {
            const span_event *e = &tr->sp[i];
            bool is_top = strcmp(e->name, phase_name((phase)e->phase)) == 0;
            bool open = false, close = false;
            if (pass == 0 && is_top) {
                open = e->ph == 'B';
                close = e->ph == 'E';
                if (open) top = (phase)e->phase;
            } else if (pass == 1 && !is_top && e->phase == PH_RECOMPUTE) {
                /* nested recomputations (a segment of blocks) merge into one band */
                open = e->ph == 'B' && depth++ == 0;
                close = e->ph == 'E' && --depth == 0;
                top = PH_RECOMPUTE;
            }
            if (open) start = e->t;
            if (close && start >= 0) {
                util_str_printf(o,
                                "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" "
                                "fill=\"%s\"/>\n",
                                x0 + pw * start / tmax, y0, fmax(pw * (e->t - start) / tmax, 0.5),
                                ph, phase_color(top));
                start = -1;
            }
        }
    }
}

bool svg_timeline(const char *path, const char *title, int n, const trace *const *traces,
                  const char *const *labels) {
    const double W = 960, ML = 70, MR = 20, PH = 150, GAP = 46, TOP = 86;
    const double pw = W - ML - MR;
    double H = TOP + n * (PH + GAP) + 30;
    double tmax = 0, ymax = 0;
    for (int k = 0; k < n; k++) {
        tmax = fmax(tmax, traces[k]->t_end);
        ymax = fmax(ymax, (double)traces[k]->peak_current);
    }
    if (tmax <= 0) tmax = 1e-3;
    if (ymax <= 0) ymax = 1;
    double ystep = nice_step(ymax / MIB, 4) * MIB, tstep = nice_step(tmax * 1e3, 8);
    ymax = ceil(ymax / ystep) * ystep;

    util_str o = {0};
    header(&o, W, H);
    util_str_printf(&o, "<text x=\"%.0f\" y=\"22\" font-size=\"16\" font-weight=\"bold\">", ML);
    esc(&o, title);
    util_str_printf(&o, "</text>\n");
    /* legend */
    const phase leg[] = {PH_FORWARD, PH_BACKWARD, PH_RECOMPUTE, PH_OPTIMIZER};
    for (int i = 0; i < 4; i++) {
        double lx = ML + i * 120;
        util_str_printf(&o,
                        "<rect x=\"%.0f\" y=\"32\" width=\"14\" height=\"12\" fill=\"%s\" "
                        "stroke=\"#999\"/><text x=\"%.0f\" y=\"43\">%s</text>\n",
                        lx, phase_color(leg[i]), lx + 19, phase_name(leg[i]));
    }
    util_str_printf(&o,
                    "<line x1=\"%.0f\" y1=\"38\" x2=\"%.0f\" y2=\"38\" stroke=\"#1d4ed8\" "
                    "stroke-width=\"2\"/><text x=\"%.0f\" y=\"43\">allocated bytes</text>\n",
                    ML + 480, ML + 500, ML + 505);
    /* why these times exceed the table's medians */
    util_str_printf(&o,
                    "<text x=\"%.0f\" y=\"62\" font-size=\"11\" fill=\"#555\">times are those of "
                    "the traced step: every allocation is recorded with a read of the RSS, and in "
                    "remat bench every tensor</text>\n<text x=\"%.0f\" y=\"75\" font-size=\"11\" "
                    "fill=\"#555\">above 64 KiB gets fresh pages (page faults) so that RSS can be "
                    "measured: slower than the untraced repetitions whose median the table shows"
                    "</text>\n",
                    ML, ML);

    int cols = (int)pw;
    double *colv = malloc(sizeof(double) * (size_t)cols);
    for (int k = 0; k < n && colv; k++) {
        const trace *tr = traces[k];
        double y0 = TOP + k * (PH + GAP) + 18;
        util_str_printf(&o, "<text x=\"%.0f\" y=\"%.0f\" font-weight=\"bold\">", ML, y0 - 6);
        esc(&o, labels[k]);
        char pk[32], act[32];
        util_fmt_bytes((double)tr->peak_current, pk, sizeof pk);
        util_fmt_bytes((double)tr->peak_current - (double)tr->start_current, act, sizeof act);
        util_str_printf(&o,
                        "</text><text x=\"%.0f\" y=\"%.0f\" fill=\"#444\">peak %s (+%s over the "
                        "step's start), %.1f ms traced",
                        ML + 170, y0 - 6, pk, act, tr->t_end * 1e3);
        if (tr->n_recomputed_blocks)
            util_str_printf(&o, ", %lld block runs recomputed", (long long)tr->n_recomputed_blocks);
        util_str_printf(&o, "</text>\n");
        util_str_printf(&o,
                        "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" "
                        "fill=\"#fafafa\" stroke=\"#bbb\"/>\n",
                        ML, y0, pw, PH);
        bands(&o, tr, ML, y0, pw, PH, tmax);
        /* grid + y labels */
        for (double v = 0; v <= ymax + 1; v += ystep) {
            double y = y0 + PH - PH * v / ymax;
            util_str_printf(&o,
                            "<line x1=\"%.0f\" y1=\"%.2f\" x2=\"%.0f\" y2=\"%.2f\" "
                            "stroke=\"#ddd\"/><text x=\"%.0f\" y=\"%.2f\" text-anchor=\"end\">"
                            "%g MiB</text>\n",
                            ML, y, ML + pw, y, ML - 4, y + 4, v / MIB);
        }
        /* memory curve: the highest level per pixel column (keeps the peaks); a
         * free is observed with the level after it, so the level before it
         * (current + freed bytes) counts too */
        for (int c = 0; c < cols; c++) colv[c] = -1;
        for (size_t i = 0; i < tr->n; i++) {
            const mem_event *e = &tr->ev[i];
            int c = (int)(e->t / tmax * (cols - 1));
            if (c < 0) c = 0;
            if (c >= cols) c = cols - 1;
            double v = (double)e->current + (e->delta < 0 ? (double)(-e->delta) : 0.0);
            if (v > colv[c]) colv[c] = v;
        }
        int cend = (int)(tr->t_end / tmax * (cols - 1));
        if (cend >= cols) cend = cols - 1;
        double last = (double)tr->start_current;
        size_t ei = 0;
        util_str_printf(&o,
                        "<path fill=\"#93c5fd\" fill-opacity=\"0.55\" stroke=\"#1d4ed8\" "
                        "stroke-width=\"1.2\" d=\"M%.1f,%.2f",
                        ML, y0 + PH);
        for (int c = 0; c <= cend; c++) {
            double v = colv[c] >= 0 ? colv[c] : last;
            /* level after this column's events, carried into empty columns */
            while (ei < tr->n && (int)(tr->ev[ei].t / tmax * (cols - 1)) <= c)
                last = (double)tr->ev[ei++].current;
            util_str_printf(&o, " L%.1f,%.2f", ML + c, y0 + PH - PH * v / ymax);
        }
        util_str_printf(&o, " L%.1f,%.2f Z\"/>\n", ML + cend, y0 + PH);
        /* x axis */
        for (double t = 0; t <= tmax * 1e3 + 1e-9; t += tstep) {
            double x = ML + pw * t / (tmax * 1e3);
            util_str_printf(
                &o,
                "<line x1=\"%.2f\" y1=\"%.0f\" x2=\"%.2f\" y2=\"%.0f\" stroke=\"#888\"/>"
                "<text x=\"%.2f\" y=\"%.0f\" text-anchor=\"middle\" font-size=\"10\">"
                "%g</text>\n",
                x, y0 + PH, x, y0 + PH + 4, x, y0 + PH + 15, t);
        }
    }
    free(colv);
    util_str_printf(&o,
                    "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">time in the step (ms)"
                    "</text>\n</svg>\n",
                    ML + pw / 2, H - 8);
    return write_file(path, &o);
}

bool svg_tradeoff(const char *path, const char *title, int n, const tradeoff_point *pts) {
    const double W = 720, ML = 80, MR = 30, MT = 50, MB = 60, PH = 370;
    const double H = MT + PH + MB + 18.0 * n + 16;
    const double pw = W - ML - MR, ph = PH;
    double xmax = 0, ymax = 0;
    for (int i = 0; i < n; i++) {
        xmax = fmax(xmax, pts[i].step_ms);
        ymax = fmax(ymax, pts[i].peak_bytes);
    }
    if (xmax <= 0) xmax = 1;
    if (ymax <= 0) ymax = 1;
    double xs = nice_step(xmax * 1.1, 6), ys = nice_step(ymax * 1.1 / MIB, 5) * MIB;
    xmax = ceil(xmax * 1.1 / xs) * xs;
    ymax = ceil(ymax * 1.1 / ys) * ys;
    util_str o = {0};
    header(&o, W, H);
    util_str_printf(&o, "<text x=\"%.0f\" y=\"26\" font-size=\"16\" font-weight=\"bold\">", ML);
    esc(&o, title);
    util_str_printf(&o,
                    "</text>\n<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" "
                    "fill=\"#fafafa\" stroke=\"#bbb\"/>\n",
                    ML, MT, pw, ph);
    for (double v = 0; v <= ymax + 1; v += ys) {
        double y = MT + ph - ph * v / ymax;
        util_str_printf(&o,
                        "<line x1=\"%.0f\" y1=\"%.2f\" x2=\"%.0f\" y2=\"%.2f\" stroke=\"#ddd\"/>"
                        "<text x=\"%.0f\" y=\"%.2f\" text-anchor=\"end\">%g MiB</text>\n",
                        ML, y, ML + pw, y, ML - 5, y + 4, v / MIB);
    }
    for (double v = 0; v <= xmax + 1e-9; v += xs) {
        double x = ML + pw * v / xmax;
        util_str_printf(&o,
                        "<line x1=\"%.2f\" y1=\"%.0f\" x2=\"%.2f\" y2=\"%.0f\" stroke=\"#ddd\"/>"
                        "<text x=\"%.2f\" y=\"%.0f\" text-anchor=\"middle\">%g</text>\n",
                        x, MT, x, MT + ph, x, MT + ph + 16, v);
    }
    util_str_printf(&o,
                    "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">step time, forward + "
                    "backward (ms, median)</text>\n"
                    "<text x=\"18\" y=\"%.0f\" text-anchor=\"middle\" transform=\"rotate(-90 18 "
                    "%.0f)\">allocator peak during the step</text>\n",
                    ML + pw / 2, MT + ph + 36, MT + ph / 2, MT + ph / 2);
    /* points carry their number; the legend under the plot names them (labels
     * beside points collide as soon as two strategies cost about the same).
     * Bars first, so that no bar covers a marker. */
    for (int i = 0; i < n; i++) {
        double x = ML + pw * pts[i].step_ms / xmax, y = MT + ph - ph * pts[i].peak_bytes / ymax;
        double yb = MT + ph - ph * pts[i].baseline_bytes / ymax;
        /* the bar from the baseline (parameters + state) to the peak is what the step adds */
        util_str_printf(&o,
                        "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#93c5fd\" "
                        "stroke-width=\"6\" stroke-opacity=\"0.7\"/>\n",
                        x, yb, x, y);
    }
    /* Two strategies of about the same time and memory would put one marker
     * on the other: a marker that would overlap one already drawn moves
     * sideways to the nearest free place, joined to its true point (a dot)
     * by a thin line. */
    double(*placed)[2] = malloc(sizeof *placed * (size_t)(n > 0 ? n : 1));
    for (int i = 0; placed && i < n; i++) {
        double x = ML + pw * pts[i].step_ms / xmax, y = MT + ph - ph * pts[i].peak_bytes / ymax;
        double mx = svg_dodge_x((const double(*)[2])placed, i, x, y, 18); /* r 8, 2 apart */
        placed[i][0] = mx;
        placed[i][1] = y;
        if (mx != x)
            util_str_printf(&o,
                            "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" "
                            "stroke=\"#1d4ed8\" stroke-width=\"1\"/>"
                            "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"2.5\" fill=\"#1d4ed8\"/>\n",
                            x, y, mx, y, x, y);
        util_str_printf(&o,
                        "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"8\" fill=\"#1d4ed8\" "
                        "stroke=\"white\" stroke-width=\"1.5\"/>\n"
                        "<text x=\"%.2f\" y=\"%.2f\" fill=\"white\" font-size=\"10\" "
                        "font-weight=\"bold\" text-anchor=\"middle\">%d</text>\n",
                        mx, y, mx, y + 3.5, i + 1);
    }
    free(placed);
    for (int i = 0; i < n; i++) {
        double lx = ML, ly = MT + ph + 62 + i * 18;
        char b[32], text[160];
        snprintf(text, sizeof text, "%s: %s peak, %.1f ms", pts[i].label,
                 util_fmt_bytes(pts[i].peak_bytes, b, sizeof b), pts[i].step_ms);
        util_str_printf(&o,
                        "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"7\" fill=\"#1d4ed8\"/>"
                        "<text x=\"%.2f\" y=\"%.2f\" fill=\"white\" font-size=\"9\" "
                        "font-weight=\"bold\" text-anchor=\"middle\">%d</text>"
                        "<text x=\"%.2f\" y=\"%.2f\">",
                        lx + 7, ly - 4, lx + 7, ly - 1, i + 1, lx + 20, ly);
        esc(&o, text);
        util_str_printf(&o, "</text>\n");
    }
    util_str_printf(&o,
                    "<text x=\"%.0f\" y=\"%.0f\" fill=\"#555\" font-size=\"11\">bars: from "
                    "the memory held before the step (parameters, batch) to the peak"
                    "</text>\n</svg>\n",
                    ML + 6, MT + 16);
    return write_file(path, &o);
}

/* ---- Pareto plot ------------------------------------------------------------------------ */
static const char *const PARETO_COLOR[] = {"#111827", "#ea580c", "#1d4ed8", "#059669", "#7c3aed"};

static void pareto_marker(util_str *o, pareto_kind k, double x, double y, double r) {
    const char *c = PARETO_COLOR[k];
    switch (k) {
    case PARETO_PLANNED:
    case PARETO_BLOCKS:
        util_str_printf(o,
                        "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"%.1f\" fill=\"%s\" "
                        "stroke=\"white\" stroke-width=\"1\"/>\n",
                        x, y, r, c);
        break;
    case PARETO_UNIFORM:
        util_str_printf(o,
                        "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.1f\" height=\"%.1f\" "
                        "fill=\"%s\" stroke=\"white\" stroke-width=\"1\"/>\n",
                        x - r, y - r, 2 * r, 2 * r, c);
        break;
    case PARETO_NONE:
        util_str_printf(o,
                        "<path d=\"M%.2f,%.2f L%.2f,%.2f L%.2f,%.2f L%.2f,%.2f Z\" "
                        "fill=\"%s\"/>\n",
                        x, y - 1.4 * r, x + 1.4 * r, y, x, y + 1.4 * r, x - 1.4 * r, y, c);
        break;
    default:
        util_str_printf(o, "<path d=\"M%.2f,%.2f L%.2f,%.2f L%.2f,%.2f Z\" fill=\"%s\"/>\n", x,
                        y - 1.3 * r, x + 1.2 * r, y + 0.9 * r, x - 1.2 * r, y + 0.9 * r, c);
    }
}

static int cmp_peak(const void *a, const void *b) {
    const pareto_point *p = *(const pareto_point *const *)a, *q = *(const pareto_point *const *)b;
    if (p->peak_bytes != q->peak_bytes) return p->peak_bytes < q->peak_bytes ? -1 : 1;
    return (p->step_ms > q->step_ms) - (p->step_ms < q->step_ms);
}

static int cmp_budget(const void *a, const void *b) {
    const pareto_point *p = *(const pareto_point *const *)a, *q = *(const pareto_point *const *)b;
    return (p->budget_bytes > q->budget_bytes) - (p->budget_bytes < q->budget_bytes);
}

/* An axis range [lo, hi] around [vmin, vmax] on a nice step. */
static void axis_range(double vmin, double vmax, int ticks, double *lo, double *hi, double *step) {
    double pad = (vmax - vmin) * 0.08;
    if (pad <= 0) pad = vmax > 0 ? vmax * 0.05 : 1;
    *step = nice_step(vmax - vmin + 2 * pad, ticks);
    *lo = floor((vmin - pad) / *step) * *step;
    if (*lo < 0) *lo = 0;
    *hi = ceil((vmax + pad) / *step) * *step;
    if (*hi <= *lo) *hi = *lo + *step;
}

/* The plot's frame: where the axes' ranges [x0, x1] and [y0, y1] land. */
typedef struct svg_frame {
    double ml, mt, pw, ph, x0, x1, y0, y1;
} svg_frame;
static double fx(const svg_frame *f, double v) {
    return f->ml + f->pw * (v - f->x0) / (f->x1 - f->x0);
}
static double fy(const svg_frame *f, double v) {
    return f->mt + f->ph - f->ph * (v - f->y0) / (f->y1 - f->y0);
}

static void pareto_front(util_str *o, svg_obstacles *obst, const svg_frame *f, int n,
                         const pareto_point **ord) {
    /* the Pareto front of every point: the fastest step at each memory level,
     * as a staircase (a point is on it if nothing uses less memory and less time) */
    util_str_printf(o, "<path fill=\"none\" stroke=\"#6b7280\" stroke-width=\"1.5\" "
                       "stroke-dasharray=\"6,4\" d=\"");
    double best = INFINITY, lastx = 0;
    bool started = false;
    for (int i = 0; i < n; i++) {
        if (!(ord[i]->step_ms < best)) continue;
        double x = fx(f, ord[i]->peak_bytes / MIB), y = fy(f, ord[i]->step_ms);
        if (!started) {
            util_str_printf(o, "M%.2f,%.2f", x, y);
        } else {
            util_str_printf(o, " L%.2f,%.2f L%.2f,%.2f", x, fy(f, best), x, y);
            svg_obstacles_add_seg(obst, lastx, fy(f, best), x, fy(f, best));
            svg_obstacles_add_seg(obst, x, fy(f, best), x, y);
        }
        started = true;
        best = ord[i]->step_ms;
        lastx = x;
    }
    if (started) {
        util_str_printf(o, " L%.2f,%.2f", fmax(lastx, f->ml + f->pw), fy(f, best));
        svg_obstacles_add_seg(obst, lastx, fy(f, best), fmax(lastx, f->ml + f->pw), fy(f, best));
    }
    util_str_printf(o, "\"/>\n");
}

/* The planners' curves: planned points joined in order of budget (op level, whole blocks). */
static void pareto_planned(util_str *o, svg_obstacles *obst, const svg_frame *f, int n,
                           const pareto_point *pts) {
    const pareto_point **pl = malloc(sizeof *pl * (size_t)(n > 0 ? n : 1));
    for (int kind = PARETO_PLANNED; pl && kind <= PARETO_BLOCKS;
         kind += PARETO_BLOCKS - PARETO_PLANNED) {
        int npl = 0;
        for (int i = 0; i < n; i++)
            if (pts[i].kind == (pareto_kind)kind) pl[npl++] = &pts[i];
        if (!npl) continue;
        qsort(pl, (size_t)npl, sizeof *pl, cmp_budget);
        util_str_printf(o,
                        "<path fill=\"none\" stroke=\"%s\" stroke-width=\"2\" "
                        "stroke-opacity=\"0.6\" d=\"",
                        PARETO_COLOR[kind]);
        for (int i = 0; i < npl; i++) {
            util_str_printf(o, "%s%.2f,%.2f", i ? " L" : "M", fx(f, pl[i]->peak_bytes / MIB),
                            fy(f, pl[i]->step_ms));
            if (i)
                svg_obstacles_add_seg(obst, fx(f, pl[i - 1]->peak_bytes / MIB),
                                      fy(f, pl[i - 1]->step_ms), fx(f, pl[i]->peak_bytes / MIB),
                                      fy(f, pl[i]->step_ms));
        }
        util_str_printf(o, "\"/>\n");
    }
    free(pl);
}

/* The label of point p (its marker at x, y) at the first of eight places around the marker,
 * in the order its kind prefers, where it meets no obstacle inside area; none fits: no label. */
static void pareto_label(util_str *o, svg_obstacles *obst, svg_box area, const pareto_point *p,
                         double x, double y) {
    /* offsets of the label's anchor point; text-anchor start (s), end (e) or middle (m) */
    static const struct {
        double dx, dy;
        char anchor;
    } spot[8] = {{7, 17, 's'}, {-7, -8, 'e'}, {9, 4, 's'},   {-9, 4, 'e'},
                 {7, -8, 's'}, {-7, 17, 'e'}, {0, -10, 'm'}, {0, 20, 'm'}};
    static const int prefer[5][8] = {/* none */ {2, 4, 0, 3, 1, 5, 6, 7},
                                     /* uniform */ {0, 5, 7, 2, 3, 4, 1, 6},
                                     /* planned */ {1, 4, 6, 3, 2, 0, 5, 7},
                                     /* other */ {2, 4, 0, 3, 1, 5, 6, 7},
                                     /* blocks */ {0, 5, 7, 2, 3, 4, 1, 6}};
    char lab[96];
    switch (p->kind) {
    case PARETO_UNIFORM: snprintf(lab, sizeof lab, "N=%d", p->segments); break;
    case PARETO_PLANNED:
    case PARETO_BLOCKS:
        snprintf(lab, sizeof lab, p->budget_bytes < 10 * MIB ? "%.2f" : "%.1f",
                 p->budget_bytes / MIB);
        break;
    default: snprintf(lab, sizeof lab, "%s", p->label ? p->label : "?");
    }
    double w = 5.8 * (double)strlen(lab);
    for (int c = 0; c < 8; c++) {
        int sp = prefer[p->kind][c];
        double ax = x + spot[sp].dx, ay = y + spot[sp].dy;
        double bx = spot[sp].anchor == 's' ? ax : spot[sp].anchor == 'e' ? ax - w : ax - w / 2;
        svg_box box = {bx, ay - 9, bx + w, ay + 2};
        if (!svg_place_free(obst, box, area)) continue;
        svg_obstacles_add_box(obst, box);
        util_str_printf(o,
                        "<text x=\"%.2f\" y=\"%.2f\" font-size=\"10\" fill=\"%s\" "
                        "text-anchor=\"%s\">",
                        ax, ay, PARETO_COLOR[p->kind],
                        spot[sp].anchor == 's'   ? "start"
                        : spot[sp].anchor == 'e' ? "end"
                                                 : "middle");
        esc(o, lab);
        util_str_printf(o, "</text>\n");
        break;
    }
}

bool svg_pareto(const char *path, const char *title, const char *subtitle, int n,
                const pareto_point *pts) {
    const double W = 900, ML = 78, MR = 230, MT = 70, PH = 430, MB = 58;
    /* the list of points beside the plot starts ~200 px down, 13 px a row */
    const double H = fmax(MT + PH + MB, MT + 215 + 13.0 * n), pw = W - ML - MR;
    const pareto_point **ord = malloc(sizeof *ord * (size_t)(n > 0 ? n : 1));
    if (!ord) return false;
    double xmin = INFINITY, xmax = 0, ymin = INFINITY, ymax = 0, base = INFINITY;
    for (int i = 0; i < n; i++) {
        ord[i] = &pts[i];
        xmin = fmin(xmin, pts[i].peak_bytes / MIB);
        xmax = fmax(xmax, pts[i].peak_bytes / MIB);
        ymin = fmin(ymin, pts[i].step_ms);
        ymax = fmax(ymax, pts[i].step_ms);
        base = fmin(base, pts[i].baseline_bytes / MIB);
    }
    if (n == 0) xmin = ymin = base = 0;
    qsort(ord, (size_t)n, sizeof *ord, cmp_peak);
    double x0, x1, xs, y0, y1, ys;
    axis_range(xmin, xmax, 8, &x0, &x1, &xs);
    axis_range(ymin, ymax, 6, &y0, &y1, &ys);
#define PX(v) (ML + pw * ((v)-x0) / (x1 - x0))
#define PY(v) (MT + PH - PH * ((v)-y0) / (y1 - y0))

    util_str o = {0};
    header(&o, W, H);
    util_str_printf(&o, "<text x=\"%.0f\" y=\"24\" font-size=\"16\" font-weight=\"bold\">", ML);
    esc(&o, title);
    util_str_printf(&o, "</text>\n");
    if (subtitle) {
        util_str_printf(&o, "<text x=\"%.0f\" y=\"44\" font-size=\"11\" fill=\"#444\">", ML);
        esc(&o, subtitle);
        util_str_printf(&o, "</text>\n");
    }
    util_str_printf(&o,
                    "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" "
                    "fill=\"#fafafa\" stroke=\"#bbb\"/>\n",
                    ML, MT, pw, PH);
    for (double v = x0; v <= x1 + xs * 1e-6; v += xs)
        util_str_printf(&o,
                        "<line x1=\"%.2f\" y1=\"%.0f\" x2=\"%.2f\" y2=\"%.0f\" stroke=\"#e5e5e5\"/>"
                        "<text x=\"%.2f\" y=\"%.0f\" text-anchor=\"middle\">%g</text>\n",
                        PX(v), MT, PX(v), MT + PH, PX(v), MT + PH + 16, v);
    for (double v = y0; v <= y1 + ys * 1e-6; v += ys)
        util_str_printf(&o,
                        "<line x1=\"%.0f\" y1=\"%.2f\" x2=\"%.0f\" y2=\"%.2f\" stroke=\"#e5e5e5\"/>"
                        "<text x=\"%.0f\" y=\"%.2f\" text-anchor=\"end\">%g</text>\n",
                        ML, PY(v), ML + pw, PY(v), ML - 5, PY(v) + 4, v);
    util_str_printf(&o,
                    "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">allocator peak during "
                    "the step (MiB, parameters included)</text>\n"
                    "<text x=\"18\" y=\"%.0f\" text-anchor=\"middle\" transform=\"rotate(-90 18 "
                    "%.0f)\">step time, forward + backward (ms, median)</text>\n",
                    ML + pw / 2, MT + PH + 40, MT + PH / 2, MT + PH / 2);
    /* what the step starts from: parameters and batch (no strategy goes below) */
    if (n > 0 && base >= x0 && base <= x1)
        util_str_printf(&o,
                        "<line x1=\"%.2f\" y1=\"%.0f\" x2=\"%.2f\" y2=\"%.0f\" stroke=\"#9ca3af\" "
                        "stroke-dasharray=\"2,3\"/><text x=\"%.2f\" y=\"%.0f\" font-size=\"10\" "
                        "fill=\"#6b7280\">before the step</text>\n",
                        PX(base), MT, PX(base), MT + PH, PX(base) + 3, MT + 12);

    svg_obstacles obst = {0}; /* lines, markers and labels a label must not meet */
    const svg_frame fr = {ML, MT, pw, PH, x0, x1, y0, y1};
    pareto_front(&o, &obst, &fr, n, ord);
    pareto_planned(&o, &obst, &fr, n, pts);

    /* markers, then labels */
    for (int i = 0; i < n; i++)
        pareto_marker(&o, ord[i]->kind, PX(ord[i]->peak_bytes / MIB), PY(ord[i]->step_ms), 5);
    /* Each label goes to the first of eight places around its marker (uniform
     * below-right, planned above-left, others right first) where it meets no
     * marker, no label already placed and no line (the Pareto front, the
     * planner's curve), inside the plot; a label with no such place is left
     * out (the list beside the plot names every point). none and planned
     * points are labelled first. */
    for (int i = 0; i < n; i++) { /* the markers are obstacles too */
        double x = PX(ord[i]->peak_bytes / MIB), y = PY(ord[i]->step_ms);
        svg_obstacles_add_box(&obst, (svg_box){x - 6, y - 6, x + 6, y + 6});
    }
    const svg_box area = {ML + 2, MT + 2, ML + pw - 2, MT + PH - 2};
    const pareto_kind label_order[] = {PARETO_NONE, PARETO_PLANNED, PARETO_BLOCKS, PARETO_OTHER,
                                       PARETO_UNIFORM};
    for (int pass = 0; pass < 5; pass++)
        for (int i = 0; i < n; i++) {
            const pareto_point *p = ord[i];
            if (p->kind != label_order[pass]) continue;
            pareto_label(&o, &obst, area, p, PX(p->peak_bytes / MIB), PY(p->step_ms));
        }
    svg_obstacles_free(&obst);

    /* legend */
    const double lx = ML + pw + 22;
    double ly = MT + 10;
    static const char *const what[] = {"none (no checkpointing)", "uniform: sequential=N",
                                       "planner: budget=SIZE (per op)", "other strategies",
                                       "planner: budget=SIZE:blocks-only"};
    static const char *const note[] = {"", "label: N segments", "label: budget in MiB", "",
                                       "label: budget in MiB"};
    int count[5] = {0, 0, 0, 0, 0};
    for (int i = 0; i < n; i++) count[pts[i].kind]++;
    const pareto_kind order[] = {PARETO_PLANNED, PARETO_BLOCKS, PARETO_UNIFORM, PARETO_NONE,
                                 PARETO_OTHER};
    for (int k = 0; k < 5; k++) {
        pareto_kind kd = order[k];
        if (!count[kd]) continue;
        pareto_marker(&o, kd, lx + 6, ly, 5);
        util_str_printf(&o, "<text x=\"%.0f\" y=\"%.0f\">%s</text>\n", lx + 18, ly + 4, what[kd]);
        if (note[kd][0]) {
            ly += 15;
            util_str_printf(&o,
                            "<text x=\"%.0f\" y=\"%.0f\" font-size=\"10\" fill=\"#555\">%s"
                            "</text>\n",
                            lx + 18, ly + 4, note[kd]);
        }
        ly += 22;
    }
    util_str_printf(&o,
                    "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"#6b7280\" "
                    "stroke-width=\"1.5\" stroke-dasharray=\"6,4\"/>"
                    "<text x=\"%.0f\" y=\"%.0f\">Pareto front (all points)</text>\n",
                    lx, ly, lx + 14, ly, lx + 18, ly + 4);
    ly += 30;
    /* the points as a list too: exact numbers, and labels that cannot collide */
    util_str_printf(&o,
                    "<text x=\"%.0f\" y=\"%.0f\" font-size=\"10\" font-weight=\"bold\" "
                    "font-family=\"monospace\" xml:space=\"preserve\">%8s %6s  %s</text>\n",
                    lx, ly, "peak MiB", "ms", "strategy");
    for (int i = 0; i < n && ly < H - 14; i++) {
        ly += 13;
        const pareto_point *p = ord[i];
        char line[160];
        snprintf(line, sizeof line, "%8.1f %6.1f  %s", p->peak_bytes / MIB, p->step_ms,
                 p->label ? p->label : "?");
        util_str_printf(&o,
                        "<text x=\"%.0f\" y=\"%.0f\" font-size=\"10\" "
                        "font-family=\"monospace\" xml:space=\"preserve\" fill=\"%s\">",
                        lx, ly, PARETO_COLOR[p->kind]);
        esc(&o, line);
        util_str_printf(&o, "</text>\n");
    }
    util_str_printf(&o, "</svg>\n");
#undef PX
#undef PY
    free(ord);
    return write_file(path, &o);
}
