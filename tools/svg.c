/* tools/svg.c — SVG plots (see svg.h). */
#include "svg.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

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
    const double W = 960, ML = 70, MR = 20, PH = 150, GAP = 46, TOP = 58;
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
                        "step's start), %.1f ms",
                        ML + 170, y0 - 6, pk, act, tr->t_end * 1e3);
        if (tr->n_recomputed_blocks)
            util_str_printf(&o, ", %lld block runs recomputed",
                            (long long)tr->n_recomputed_blocks);
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
        util_str_printf(&o, "<path fill=\"#93c5fd\" fill-opacity=\"0.55\" stroke=\"#1d4ed8\" "
                            "stroke-width=\"1.2\" d=\"M%.1f,%.2f", ML, y0 + PH);
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
            util_str_printf(&o,
                            "<line x1=\"%.2f\" y1=\"%.0f\" x2=\"%.2f\" y2=\"%.0f\" stroke=\"#888\"/>"
                            "<text x=\"%.2f\" y=\"%.0f\" text-anchor=\"middle\" font-size=\"10\">"
                            "%g</text>\n",
                            x, y0 + PH, x, y0 + PH + 4, x, y0 + PH + 15, t);
        }
    }
    free(colv);
    util_str_printf(&o, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">time in the step (ms)"
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
    util_str_printf(&o, "</text>\n<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" "
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
     * beside points collide as soon as two strategies cost about the same) */
    for (int i = 0; i < n; i++) {
        double x = ML + pw * pts[i].step_ms / xmax, y = MT + ph - ph * pts[i].peak_bytes / ymax;
        double yb = MT + ph - ph * pts[i].baseline_bytes / ymax;
        /* the bar from the baseline (parameters + state) to the peak is what the step adds */
        util_str_printf(&o,
                        "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#93c5fd\" "
                        "stroke-width=\"6\" stroke-opacity=\"0.7\"/>\n"
                        "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"8\" fill=\"#1d4ed8\" "
                        "fill-opacity=\"0.85\"/>\n"
                        "<text x=\"%.2f\" y=\"%.2f\" fill=\"white\" font-size=\"10\" "
                        "font-weight=\"bold\" text-anchor=\"middle\">%d</text>\n",
                        x, yb, x, y, x, y, x, y + 3.5, i + 1);
    }
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
    util_str_printf(&o, "<text x=\"%.0f\" y=\"%.0f\" fill=\"#555\" font-size=\"11\">bars: from "
                        "the memory held before the step (parameters, batch) to the peak"
                        "</text>\n</svg>\n",
                    ML + 6, MT + 16);
    return write_file(path, &o);
}
