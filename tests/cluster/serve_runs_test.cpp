// The runs API of weir serve with --db: runs queued in a throwaway PostgreSQL and run by the
// server's embedded worker (runs_api_suite.hpp, shared with the in-process instance).
#include "pg_server.hpp"
#include "runs_api_suite.hpp"

namespace weir::serve::runs_suite {

std::string runs_db(const std::string&) {
  return weir::testing::fresh_database_uri();
}

INSTANTIATE_TEST_SUITE_P(Postgres, RunsApi, ::testing::Values(std::string("postgres")));

}  // namespace weir::serve::runs_suite
