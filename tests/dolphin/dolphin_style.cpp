// dolphin_style.cpp - dolphin_style.c built as C++: the SISCI headers
// declare everything with C linkage (extern "C") and compile clean under the
// same warning set (-Wstrict-prototypes aside, which is C only).
#include "dolphin_style.c"
