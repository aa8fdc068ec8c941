// Stacked bar charts as standalone SVG 1.1 files, drawn by the project
// itself so that a run's memory and step-time pictures need no Python:
// e.g. memory per rank by category (parameters / gradients / optimizer
// states), or the step-time breakdown per rank (compute / comm_wait /
// optimizer / io_wait / checkpoint / other).
//
// Every bar is one `<g class="series" data-label="...">` group holding one
// `<rect class="segment" data-category="...">` per non-zero value (stacked
// bottom-up in category order, each with a `<title>` tooltip) and its label,
// so a checker counts one series per rank. A chart has a title, a y axis
// with a few rounded ticks labelled in the chart's unit, and a legend
// (`<g class="legend">`). Several charts (e.g. one per ZeRO stage) can share
// one file as panels laid out top to bottom (`<g class="panel">`).
//
// All text is XML-escaped; values that are negative, NaN or infinite are
// drawn as 0 (the tooltip still shows them). Pure functions, thread-safe.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace zeroshard::examples {

/// One bar: its label under the x axis (e.g. "rank 0", "stage 3") and one
/// value per category of its chart, in the chart's unit.
struct Bar {
  std::string label;
  std::vector<double> values;
};

/// A stacked bar chart: `categories` are the stack segments (bottom first)
/// and name the legend's entries; `unit` labels the y axis (e.g. "MiB",
/// "ms"). Bars may have fewer values than categories (the rest are 0).
struct BarChart {
  std::string title;
  std::string unit;
  std::vector<std::string> categories;
  std::vector<Bar> bars;
};

/// The chart as a standalone SVG 1.1 document (XML declaration, svg root
/// with the SVG namespace). A chart without bars draws its axes and legend
/// only. Throws zeroshard::Error if a bar has more values than there are
/// categories (naming the chart and the bar).
std::string stacked_bar_svg(const BarChart& chart);

/// Several charts in one SVG document, one panel each, top to bottom (e.g.
/// memory per rank for each stage), on one common y scale so that panels
/// compare by eye (their units should agree). Throws as the single-chart
/// form.
std::string stacked_bar_svg(std::span<const BarChart> panels);

/// Writes `text` to `path` atomically and durably (temporary file in the
/// same directory, fsync, rename). Throws zeroshard::IoError naming the
/// path and errno.
void write_text_atomically(const std::string& path, const std::string& text);

/// `text` with &, <, >, " and ' replaced by XML entities, and control
/// characters that XML 1.0 forbids replaced by spaces.
std::string xml_escape(std::string_view text);

/// Rounded y-axis ticks from 0 to at least `max` (steps of 1, 2, 2.5 or 5
/// times a power of ten; about `target` steps): {0, step, ..., top} with
/// top >= max. `max` <= 0 or not finite gives {0, 1}.
std::vector<double> axis_ticks(double max, int target = 5);

}  // namespace zeroshard::examples
