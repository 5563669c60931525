#pragma once
// The report's page: its HTML, CSS and the inline JS that draws the data blob (report_html.cpp
// writes the blob).
#include <string>

namespace gpumem::detail {

// The whole page for `title` (escaped here) around `data_json`, the blob the page's JS reads.
std::string report_page(const std::string& title, const std::string& data_json);

}  // namespace gpumem::detail
