#include "examples/report/svg_chart.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "core/error.h"
#include "core/durable_file.h"

namespace zeroshard::examples {
namespace {

// Layout of one panel, in SVG user units (px).
constexpr double kLeft = 80;         // y-axis labels
constexpr double kLegendWidth = 170;
constexpr double kTop = 44;          // title
constexpr double kBottom = 44;       // bar labels
constexpr double kPlotHeight = 260;
constexpr double kBarSlot = 72;      // x space per bar
constexpr double kBarWidth = 44;
constexpr double kMinPlotWidth = 240;
constexpr double kPanelHeight = kTop + kPlotHeight + kBottom;

// Tableau 10: distinct, colour-blind friendly enough for a few categories.
constexpr std::array<const char*, 10> kPalette = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                                  "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};

double drawn(double v) { return std::isfinite(v) && v > 0 ? v : 0.0; }

double bar_total(const Bar& bar) {
  double total = 0;
  for (double v : bar.values) total += drawn(v);
  return total;
}

double plot_width(const BarChart& c) {
  return std::max(kMinPlotWidth, kBarSlot * static_cast<double>(c.bars.size()));
}
double panel_width(const BarChart& c) { return kLeft + plot_width(c) + kLegendWidth; }

/// Decimals that show every multiple of `step` exactly enough.
int decimals_for(double step) {
  int d = 0;
  while (d < 6 && std::abs(step * std::pow(10.0, d) - std::round(step * std::pow(10.0, d))) > 1e-9) ++d;
  return d;
}

std::string value_text(double v) {
  if (!std::isfinite(v)) return fmt::format("{}", v);
  return fmt::format("{:.4g}", v);
}

void check(const BarChart& c) {
  for (const Bar& b : c.bars) {
    if (b.values.size() > c.categories.size()) {
      throw Error(fmt::format("chart \"{}\": bar \"{}\" has {} values for {} categories", c.title, b.label,
                              b.values.size(), c.categories.size()));
    }
  }
}

double max_total(const BarChart& c) {
  double m = 0;
  for (const Bar& b : c.bars) m = std::max(m, bar_total(b));
  return m;
}

/// One panel's elements, its top-left corner at (0, y0), its y axis
/// reaching at least `scale_max`.
void draw_panel(std::string& out, const BarChart& c, double y0, double scale_max) {
  const double pw = plot_width(c);
  const double base = y0 + kTop + kPlotHeight;  // y of value 0
  const std::vector<double> ticks = axis_ticks(scale_max);
  const double top = ticks.back();
  const int dec = decimals_for(ticks.size() > 1 ? ticks[1] : 1.0);
  auto y_of = [&](double v) { return base - v / top * kPlotHeight; };

  out += fmt::format("<g class=\"panel\" data-title=\"{}\">\n", xml_escape(c.title));
  out += fmt::format("<text class=\"title\" x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"15\" font-weight=\"bold\">{}</text>\n",
                     kLeft, y0 + 26, xml_escape(c.title));
  // Y axis: grid lines, tick labels, unit.
  out += "<g class=\"y-axis\">\n";
  for (double t : ticks) {
    const double y = y_of(t);
    out += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.2f}\" x2=\"{:.1f}\" y2=\"{:.2f}\" stroke=\"#dddddd\"/>\n", kLeft, y,
                       kLeft + pw, y);
    out += fmt::format("<text x=\"{:.1f}\" y=\"{:.2f}\" text-anchor=\"end\">{:.{}f}</text>\n", kLeft - 6, y + 4, t,
                       dec);
  }
  out += fmt::format(
      "<text class=\"unit\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" transform=\"rotate(-90 {:.1f} {:.1f})\">{}</text>\n",
      18.0, y0 + kTop + kPlotHeight / 2, 18.0, y0 + kTop + kPlotHeight / 2, xml_escape(c.unit));
  out += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.2f}\" stroke=\"#333333\"/>\n", kLeft,
                     y0 + kTop, kLeft, base);
  out += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.2f}\" x2=\"{:.1f}\" y2=\"{:.2f}\" stroke=\"#333333\"/>\n", kLeft, base,
                     kLeft + pw, base);
  out += "</g>\n";
  // Bars: one series group each.
  const double slot = c.bars.empty() ? kBarSlot : pw / static_cast<double>(c.bars.size());
  for (std::size_t i = 0; i < c.bars.size(); ++i) {
    const Bar& b = c.bars[i];
    const double x = kLeft + slot * static_cast<double>(i) + (slot - kBarWidth) / 2;
    out += fmt::format("<g class=\"series\" data-label=\"{}\">\n", xml_escape(b.label));
    double below = 0;
    for (std::size_t k = 0; k < b.values.size(); ++k) {
      const double v = drawn(b.values[k]);
      if (v == 0) continue;
      const double y_top = y_of(below + v);
      out += fmt::format(
          "<rect class=\"segment\" data-category=\"{}\" x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" height=\"{:.2f}\" "
          "fill=\"{}\"><title>{}: {} {} {}</title></rect>\n",
          xml_escape(c.categories[k]), x, y_top, kBarWidth, y_of(below) - y_top, kPalette[k % kPalette.size()],
          xml_escape(b.label), xml_escape(c.categories[k]), value_text(b.values[k]), xml_escape(c.unit));
      below += v;
    }
    out += fmt::format("<text x=\"{:.2f}\" y=\"{:.2f}\" text-anchor=\"middle\">{}</text>\n", x + kBarWidth / 2,
                       base + 18, xml_escape(b.label));
    out += "</g>\n";
  }
  // Legend: top category first, as the stacks read top-down.
  out += "<g class=\"legend\">\n";
  const double lx = kLeft + pw + 20;
  for (std::size_t n = 0; n < c.categories.size(); ++n) {
    const std::size_t k = c.categories.size() - 1 - n;
    const double ly = y0 + kTop + 20 * static_cast<double>(n);
    out += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"12\" height=\"12\" fill=\"{}\"/>\n", lx, ly,
                       kPalette[k % kPalette.size()]);
    out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\">{}</text>\n", lx + 18, ly + 10, xml_escape(c.categories[k]));
  }
  out += "</g>\n</g>\n";
}

}  // namespace

std::string xml_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        if (static_cast<unsigned char>(ch) < 0x20 && ch != '\t' && ch != '\n' && ch != '\r') {
          out += ' ';
        } else {
          out += ch;
        }
    }
  }
  return out;
}

std::vector<double> axis_ticks(double max, int target) {
  if (!(max > 0) || !std::isfinite(max)) return {0.0, 1.0};
  target = std::max(target, 1);
  const double raw = max / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = 10 * mag;
  for (double m : {1.0, 2.0, 2.5, 5.0}) {
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  }
  std::vector<double> ticks;
  const auto n = static_cast<long>(std::ceil(max / step - 1e-9));
  for (long i = 0; i <= std::max(n, 1L); ++i) ticks.push_back(static_cast<double>(i) * step);
  return ticks;
}

std::string stacked_bar_svg(std::span<const BarChart> panels) {
  double width = kLeft + kMinPlotWidth + kLegendWidth;
  double scale_max = 0;
  for (const BarChart& c : panels) {
    check(c);
    width = std::max(width, panel_width(c));
    scale_max = std::max(scale_max, max_total(c));
  }
  const double height = kPanelHeight * static_cast<double>(std::max<std::size_t>(panels.size(), 1));
  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out += fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"{0:.0f}\" height=\"{1:.0f}\" "
      "viewBox=\"0 0 {0:.0f} {1:.0f}\" font-family=\"sans-serif\" font-size=\"12\">\n",
      width, height);
  out += fmt::format("<rect width=\"{:.0f}\" height=\"{:.0f}\" fill=\"#ffffff\"/>\n", width, height);
  for (std::size_t i = 0; i < panels.size(); ++i) draw_panel(out, panels[i], kPanelHeight * static_cast<double>(i), scale_max);
  out += "</svg>\n";
  return out;
}

std::string stacked_bar_svg(const BarChart& chart) { return stacked_bar_svg(std::span<const BarChart>(&chart, 1)); }

void write_text_atomically(const std::string& path, const std::string& text) { write_file_atomic(path, text); }

}  // namespace zeroshard::examples
