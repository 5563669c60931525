#pragma once
// The shadow model's full check (pool_model::check_full throws on what it finds), reported as a
// test failure with the model's text; the test goes on.
#include <gtest/gtest.h>

#include <exception>

#include "support/pool_model.hpp"

namespace gpumem::test {

inline void expect_model_holds(sim_pool_rig& r) {
  try {
    r.model->check_full();
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what();
  }
}

}  // namespace gpumem::test
