/* bench_check.h - test helpers for omni bench output: read the CSV back with a parser of its own (columns by
 * header name, the header checked against the documented list), check the table, and check that a chart PNG
 * shows the CSV's numbers: every plotted point's marker is found at the pixel where its value maps. */
#ifndef OMNI_TEST_BENCH_CHECK_H
#define OMNI_TEST_BENCH_CHECK_H

#include "app/bench.h"

/* The documented CSV columns, in order (README.md, bench/README.md, app/bench.h). */
extern const char *const bench_csv_columns[];
extern const int bench_csv_n_columns;

/* Parse a CSV written by omni bench into r (free with bench_results_free). Returns 0, or -1 with err filled. */
int bench_csv_read(const char *path, bench_results *r, char *err, int cap);

/* Checks the PNG at `path` (width x height) against r: size, not blank, and every marker of every panel of
 * bench_make_charts(r) at its mapped pixel (a marker hidden by the legend or covered by a later series drawn
 * over it is accepted as such). Returns the number of markers verified, or -1 with err filled. */
int bench_png_check(const char *path, const bench_results *r, int width, int height, char *err, int cap);

#endif
