/* tests/test_svg_layout.c — where the plots put markers and labels
 * (tools/report/svg_layout.c): markers never cover each other in tradeoff.svg, and
 * a label in pareto.svg goes where no line strikes it through. */
#include <math.h>

#include "report/svg_layout.h"
#include "support/rt.h"

Test(svg_layout, segment_box_intersection) {
    svg_box b = {10, 10, 20, 20};
    const double across[4] = {0, 15, 30, 15}, inside[4] = {12, 12, 13, 13},
                 diagonal[4] = {0, 0, 30, 30}, beside[4] = {0, 25, 30, 25},
                 short_of[4] = {0, 15, 9, 15}, vertical[4] = {15, 0, 15, 9},
                 corner_miss[4] = {0, 21, 9, 30}, touch[4] = {20, 0, 20, 40};
    cr_assert(svg_seg_hits_box(across, b));
    cr_assert(svg_seg_hits_box(inside, b));
    cr_assert(svg_seg_hits_box(diagonal, b));
    cr_assert(svg_seg_hits_box(touch, b));
    cr_assert(!svg_seg_hits_box(beside, b));
    cr_assert(!svg_seg_hits_box(short_of, b));
    cr_assert(!svg_seg_hits_box(vertical, b));
    cr_assert(!svg_seg_hits_box(corner_miss, b));
}

/* Five strategies at the same time and memory (as none and a budget that
 * stores everything): five markers, none within a marker's width of another. */
Test(svg_layout, coincident_markers_move_apart) {
    double placed[5][2];
    for (int i = 0; i < 5; i++) {
        placed[i][0] = svg_dodge_x((const double(*)[2])placed, i, 100, 50, 18);
        placed[i][1] = 50;
        for (int j = 0; j < i; j++)
            cr_assert_geq(fabs(placed[i][0] - placed[j][0]), 18 - 1e-9, "%d and %d overlap", i, j);
        cr_assert_leq(fabs(placed[i][0] - 100), 18 * 2 + 1e-9, "moved further than needed");
    }
    cr_assert_eq(placed[0][0], 100, "a marker with room stays where it is");
    /* a marker far enough away (other memory) is not moved */
    cr_assert_eq(svg_dodge_x((const double(*)[2])placed, 5, 100, 80, 18), 100);
}

Test(svg_layout, labels_avoid_lines_boxes_and_the_edge) {
    svg_obstacles o = {0};
    const svg_box area = {0, 0, 200, 100};
    svg_obstacles_add_seg(&o, 0, 50, 200, 50); /* a line across the plot */
    svg_obstacles_add_box(&o, (svg_box){100, 10, 120, 20});
    cr_assert(!svg_place_free(&o, (svg_box){20, 45, 60, 56}, area), "struck through by the line");
    cr_assert(svg_place_free(&o, (svg_box){20, 52, 60, 63}, area));
    cr_assert(!svg_place_free(&o, (svg_box){110, 15, 150, 26}, area), "on a box");
    cr_assert(!svg_place_free(&o, (svg_box){180, 60, 220, 71}, area), "outside the plot");
    svg_obstacles_free(&o);
    svg_obstacles_free(&o); /* twice: a no-op */
    svg_obstacles_free(NULL);
}
