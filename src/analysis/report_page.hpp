#pragma once
// The report page's template (report_page.cpp), filled in by report_html (report_html.cpp).

namespace gpumem::detail {

extern const char* const report_page_template;

}  // namespace gpumem::detail
