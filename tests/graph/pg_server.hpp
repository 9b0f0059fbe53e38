// A throwaway PostgreSQL cluster for tests: initdb into a fresh temp folder, started with pg_ctl
// on a free TCP port of 127.0.0.1 (its Unix socket in the same folder), stopped and removed when
// the test process exits. PostgreSQL refuses to run as root, so when the test runs as root the
// server's programs run as the unprivileged `postgres` user (setgid/setuid in a forked child)
// and the folder is handed to that user. One cluster per test process, started on first use;
// each test takes a fresh database from it.
//
// A missing server (no initdb/pg_ctl, no postgres user when root, a start that fails) is a test
// failure with the reason, never a skip: call PgServer::get() and ASSERT on its error.
// Server binaries: $WEIR_PG_BIN, else the newest /usr/lib/postgresql/*/bin, else `pg_config
// --bindir` on PATH.
#pragma once

#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <libpq-fe.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace weir::testing {

class PgServer {
 public:
  // The process's cluster, started on the first call. Thread safety: first call from one thread.
  static PgServer& get() {
    static PgServer server;
    return server;
  }

  // "" when the server runs; else why it does not.
  const std::string& error() const { return error_; }
  int port() const { return port_; }

  // key=value conninfo for `dbname` as the cluster's superuser `weir` over TCP.
  std::string conninfo(const std::string& dbname) const {
    return "host=127.0.0.1 port=" + std::to_string(port_) + " user=weir dbname=" + dbname +
           " connect_timeout=10";
  }

  // A new, empty database; returns its name ("" and sets *why on failure).
  std::string create_database(std::string* why) {
    static std::atomic<int> n{0};
    const std::string name = "weir_t" + std::to_string(getpid()) + "_" + std::to_string(n++);
    if (auto e = exec_admin("CREATE DATABASE " + name); !e.empty()) {
      *why = e;
      return "";
    }
    return name;
  }

  // Runs SQL in `dbname` (default: the maintenance database); "" on success, else the error.
  std::string exec_admin(const std::string& sql, const std::string& dbname = "postgres") const {
    PGconn* c = PQconnectdb(conninfo(dbname).c_str());
    std::string err;
    if (PQstatus(c) != CONNECTION_OK) {
      err = PQerrorMessage(c);
    } else {
      PGresult* r = PQexec(c, sql.c_str());
      if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK)
        err = PQresultErrorMessage(r);
      PQclear(r);
    }
    PQfinish(c);
    return err;
  }

  // Stops the server with `pg_ctl stop -m MODE` (fast: sessions are ended and the server shuts
  // down cleanly; immediate: it quits at once and recovers from its log on the next start).
  // "" on success, else why not. Connections fail until start_again().
  std::string stop(const std::string& mode) {
    if (run({bin_ + "/pg_ctl", "-D", data_, "-m", mode, "-w", "-t", "60", "stop"}) != 0)
      return "pg_ctl stop -m " + mode + " failed:\n" + log_tail();
    return "";
  }
  // Starts the stopped server again on the same port. "" on success, else why not.
  std::string start_again() {
    if (run({bin_ + "/pg_ctl", "-D", data_, "-l", dir_ + "/postgres.log", "-o", opts_, "-w", "-t",
             "60", "start"}) != 0)
      return "pg_ctl start failed:\n" + log_tail();
    return "";
  }
  // Ends every session of `dbname` but the caller's (pg_terminate_backend), as an administrator
  // or a failover would. Returns how many it ended, or -1 (and the error in *why).
  int terminate_sessions(const std::string& dbname, std::string* why = nullptr) const {
    PGconn* c = PQconnectdb(conninfo("postgres").c_str());
    int n = -1;
    if (PQstatus(c) != CONNECTION_OK) {
      if (why) *why = PQerrorMessage(c);
    } else {
      const std::string sql =
          "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
          "WHERE datname = '" +
          dbname + "' AND pid <> pg_backend_pid()";
      PGresult* r = PQexec(c, sql.c_str());
      if (PQresultStatus(r) == PGRES_TUPLES_OK)
        n = std::atoi(PQgetvalue(r, 0, 0));
      else if (why)
        *why = PQresultErrorMessage(r);
      PQclear(r);
    }
    PQfinish(c);
    return n;
  }

  ~PgServer() {
    if (started_) run({bin_ + "/pg_ctl", "-D", data_, "-m", "immediate", "-w", "stop"});
    if (!dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
    }
  }

 private:
  PgServer() { error_ = start(); }

  static std::string find_bin() {
    if (const char* e = std::getenv("WEIR_PG_BIN"); e && *e) return e;
    namespace fs = std::filesystem;
    std::string best;
    std::error_code ec;
    for (const auto& d : fs::directory_iterator("/usr/lib/postgresql", ec)) {
      const auto bin = d.path() / "bin";
      if (fs::exists(bin / "initdb") && fs::exists(bin / "pg_ctl") && bin.string() > best)
        best = bin.string();
    }
    if (!best.empty()) return best;
    FILE* p = popen("pg_config --bindir 2>/dev/null", "r");
    if (p == nullptr) return "";
    char buf[512] = {0};
    std::string out = fgets(buf, sizeof buf, p) ? buf : "";
    pclose(p);
    while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
    if (!out.empty() && fs::exists(out + "/initdb")) return out;
    return "";
  }

  static int free_port() {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof a;
    int port = -1;
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
      port = ntohs(a.sin_port);
    close(fd);
    return port;
  }

  // Runs argv (as `postgres` when we are root), output appended to the folder's log; exit code.
  int run(const std::vector<std::string>& argv) const {
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
      int log = open(log_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (log >= 0) {
        dup2(log, 1);
        dup2(log, 2);
      }
      if (geteuid() == 0) {
        if (setgroups(0, nullptr) != 0 || setgid(gid_) != 0 || setuid(uid_) != 0) _exit(126);
      }
      // The test's working directory may be closed to the server's user (root's checkout).
      if (chdir(dir_.c_str()) != 0) _exit(125);
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  std::string log_tail() const {
    std::ifstream f(log_);
    std::stringstream ss;
    ss << f.rdbuf();
    std::string s = ss.str();
    return s.size() > 2000 ? s.substr(s.size() - 2000) : s;
  }

  std::string start() {
    namespace fs = std::filesystem;
    bin_ = find_bin();
    if (!bin_.empty() && (!fs::exists(bin_ + "/initdb") || !fs::exists(bin_ + "/pg_ctl")))
      return "no PostgreSQL server programs (initdb, pg_ctl) in " + bin_ +
             " (from $WEIR_PG_BIN); run scripts/setup or point WEIR_PG_BIN at their folder";
    if (bin_.empty())
      return "no PostgreSQL server programs (initdb, pg_ctl) in $WEIR_PG_BIN, "
             "/usr/lib/postgresql/*/bin or pg_config --bindir; run scripts/setup";
    if (geteuid() == 0) {
      const passwd* pw = getpwnam("postgres");
      if (pw == nullptr)
        return "running as root and there is no 'postgres' user to run the server as "
               "(PostgreSQL refuses root); run scripts/setup";
      uid_ = pw->pw_uid;
      gid_ = pw->pw_gid;
    } else {
      uid_ = geteuid();
      gid_ = getegid();
    }
    std::string tmpl = (fs::temp_directory_path() / "weir_pg_XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) return "mkdtemp failed";
    dir_ = tmpl;
    data_ = dir_ + "/data";
    log_ = dir_ + "/server.log";
    if (chown(dir_.c_str(), uid_, gid_) != 0) return "cannot hand " + dir_ + " to the server user";
    if (int rc = run({bin_ + "/initdb", "-D", data_, "-U", "weir", "-A", "trust", "-E", "UTF8",
                      "--locale=C", "--no-sync"});
        rc != 0)
      return "initdb failed (exit " + std::to_string(rc) +
             (rc == 126   ? ": cannot switch to the postgres user"
              : rc == 125 ? ": the postgres user cannot enter " + dir_ + " (is $TMPDIR open to it?)"
                          : "") +
             "):\n" + log_tail();
    // A port picked free may be taken before the server binds it: try a few.
    for (int attempt = 0; attempt < 3; ++attempt) {
      port_ = free_port();
      opts_ = "-p " + std::to_string(port_) + " -k " + dir_ +
              " -c listen_addresses=127.0.0.1 -c fsync=off"
              " -c synchronous_commit=off -c full_page_writes=off";
      if (run({bin_ + "/pg_ctl", "-D", data_, "-l", dir_ + "/postgres.log", "-o", opts_, "-w", "-t",
               "60", "start"}) == 0) {
        started_ = true;
        return "";
      }
    }
    std::ifstream f(dir_ + "/postgres.log");
    std::stringstream ss;
    ss << f.rdbuf();
    return "pg_ctl start failed:\n" + log_tail() + ss.str();
  }

  std::string bin_, dir_, data_, log_, error_;
  std::string opts_;  // the server's options (port, socket folder, settings), for start_again
  uid_t uid_ = 0;
  gid_t gid_ = 0;
  int port_ = -1;
  bool started_ = false;
};

// A fresh database of the shared test server (its name). "" with a recorded gtest failure when
// the server or the database is missing: a missing server is a failure, not a skip.
inline std::string fresh_database() {
  PgServer& pg = PgServer::get();
  EXPECT_EQ(pg.error(), "") << "the PostgreSQL test server did not start";
  if (!pg.error().empty()) return "";
  std::string why;
  const std::string db = pg.create_database(&why);
  EXPECT_NE(db, "") << why;
  return db;
}

// The same as a postgres:// URI with a password in it (the test cluster trusts local connections
// and ignores it: tests check that weir never prints it).
inline std::string fresh_database_uri() {
  const std::string db = fresh_database();
  if (db.empty()) return "";
  return "postgres://weir:Secr3tPw@127.0.0.1:" + std::to_string(PgServer::get().port()) + "/" + db;
}

}  // namespace weir::testing
