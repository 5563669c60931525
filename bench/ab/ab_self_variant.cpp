// This tree's gpumem as bench/ab's one build (see ab_self.cpp).
#define AB_ENTRY ab_make_self
#include "ab_variant.inc"
