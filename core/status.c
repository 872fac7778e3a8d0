/*
 * core/status.c — names and texts of the core error codes.
 *
 * Both lookups are generated from CORE_STATUS_MAP in status.h, so a code
 * added there is named here without further edits.
 */
#include "status.h"

const char *core_status_name(enum core_status st)
{
    switch (st) {
#define CORE_STATUS_NAME(name, value, text) \
    case name:                              \
        return #name;
        CORE_STATUS_MAP(CORE_STATUS_NAME)
#undef CORE_STATUS_NAME
    }
    return "CORE_UNKNOWN";
}

const char *core_status_text(enum core_status st)
{
    switch (st) {
#define CORE_STATUS_TEXT(name, value, text) \
    case name:                              \
        return text;
        CORE_STATUS_MAP(CORE_STATUS_TEXT)
#undef CORE_STATUS_TEXT
    }
    return "unknown error";
}
