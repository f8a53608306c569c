// --csv --query=FIELD,...: the selectable fields (listed in Documentation/spyre-smi.md) and
// the CSV rendering, one line per card.
#pragma once

#include <string>
#include <vector>

#include "smi_report.hpp"

namespace spyre_smi {

struct CsvField {
    const char* name;  // "memory.used"
    const char* unit;  // "MiB", or "" for none
    const char* help;
};

// Every field, in documentation order.
const std::vector<CsvField>& csv_fields();
// The fields of a bare --csv.
const std::vector<std::string>& csv_default_fields();

// Parses "a,b,c" into field names; throws std::invalid_argument naming an unknown field and
// the valid ones.
std::vector<std::string> parse_csv_query(const std::string& list);

// Header ("index, name, memory.used [MiB]") unless !header, then one line per card. Unknown
// values print "N/A"; text containing a comma or a quote is quoted (RFC 4180).
std::string format_csv(const Report& r, const std::vector<std::string>& fields, bool header);

}  // namespace spyre_smi
