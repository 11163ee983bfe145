#include "s3_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "harness/test_util.h"

namespace ckpt::testing {
namespace {

bool CanConnect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  close(fd);
  return ok;
}

// Runs argv in its own process group (so Stop ends it and its children).
pid_t Spawn(const std::vector<std::string>& argv, const std::string& log) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  setpgid(0, 0);
  FILE* f = std::fopen(log.c_str(), "a");
  if (f) {
    dup2(fileno(f), 1);
    dup2(fileno(f), 2);
  }
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  execvp(args[0], args.data());
  _exit(127);
}

void KillGroup(pid_t* pid) {
  if (*pid <= 0) return;
  kill(-*pid, SIGKILL);
  waitpid(*pid, nullptr, 0);
  *pid = -1;
}

Status WaitPort(int port, pid_t pid, const std::string& what, int seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < until) {
    if (CanConnect(port)) return Status::Ok();
    if (pid > 0 && waitpid(pid, nullptr, WNOHANG) == pid) return Status::Unimplemented(what + " exited at start");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return Status::Unimplemented(what + " did not listen on 127.0.0.1:" + std::to_string(port) + " within " +
                               std::to_string(seconds) + " s");
}

std::string S3rverPath() {
  if (const char* p = std::getenv("CKPT_S3RVER")) return p;
  const char* tools = std::getenv("CKPT_TOOLS_DIR");  // as scripts/install_s3_servers.sh
  const std::string p = std::string(tools ? tools : "/opt/ckpt-tools") + "/node_modules/.bin/s3rver";
  return access(p.c_str(), X_OK) == 0 ? p : "";
}

}  // namespace

int FreeTcpPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

Result<std::unique_ptr<S3TestServer>> S3TestServer::Start(Kind kind) {
  auto s = std::unique_ptr<S3TestServer>(new S3TestServer());
  s->kind_ = kind;
  s->dir_ = ScratchDir(kind == Kind::kS3rver ? "s3rver" : "radosgw");
  s->port_ = FreeTcpPort();
  s->endpoint_ = "http://127.0.0.1:" + std::to_string(s->port_);
  if (kind == Kind::kS3rver) {
    s->access_ = s->secret_ = "S3RVER";
  } else {
    s->access_ = "CKPTTESTKEY";
    s->secret_ = "ckpt-test-secret";
  }
  CKPT_RETURN_IF_ERROR(s->Launch());
  return s;
}

Status S3TestServer::Launch() {
  if (kind_ == Kind::kS3rver) {
    const std::string bin = S3rverPath();
    if (bin.empty())
      return Status::Unimplemented("s3rver not installed (scripts/install_s3_servers.sh, or set CKPT_S3RVER)");
    std::filesystem::create_directories(dir_ + "/data");
    pid_ = Spawn({bin, "-d", dir_ + "/data", "-a", "127.0.0.1", "-p", std::to_string(port_), "--silent",
                  "--configure-bucket", "ckpt-test"},
                 dir_ + "/server.log");
    return WaitPort(port_, pid_, "s3rver", 20);
  }
  if (access("/usr/bin/radosgw", X_OK) != 0 || access("/usr/bin/ceph-osd", X_OK) != 0)
    return Status::Unimplemented("Ceph radosgw not installed (CKPT_S3_RADOSGW=1 scripts/install_s3_servers.sh)");
  const std::string script = std::string(CKPT_SOURCE_DIR) + "/scripts/s3/start_radosgw.sh";
  const std::string cmd = "timeout 120 " + script + " " + dir_ + "/ceph " + std::to_string(port_) + " >" + dir_ +
                          "/start.log 2>&1";
  if (std::system(cmd.c_str()) != 0) return Status::Unimplemented("radosgw did not start: see " + dir_ + "/start.log");
  return Status::Ok();
}

s3::S3Config S3TestServer::Config() const {
  s3::S3Config c;
  c.endpoint = endpoint_;
  c.access_key = access_;
  c.secret_key = secret_;
  return c;
}

void S3TestServer::Stop() {
  if (kind_ == Kind::kS3rver) {
    KillGroup(&pid_);
    return;
  }
  const std::string script = std::string(CKPT_SOURCE_DIR) + "/scripts/s3/stop_radosgw.sh";
  std::system((script + " " + dir_ + "/ceph >/dev/null 2>&1").c_str());
}

Status S3TestServer::Restart() {
  Stop();
  if (kind_ == Kind::kS3rver) return Launch();
  return Status::Unimplemented("restart of radosgw is not supported by the test helper");
}

S3TestServer::~S3TestServer() { Stop(); }

Result<std::unique_ptr<FaultProxy>> FaultProxy::Start(const std::string& upstream,
                                                      const std::vector<std::string>& rules) {
  auto p = std::unique_ptr<FaultProxy>(new FaultProxy());
  const int port = FreeTcpPort();
  std::vector<std::string> argv = {"/usr/bin/python3", std::string(CKPT_SOURCE_DIR) + "/tests/s3/fault_proxy.py",
                                   "--port", std::to_string(port), "--upstream", upstream};
  for (const auto& r : rules) {
    argv.push_back("--rule");
    argv.push_back(r);
  }
  p->pid_ = Spawn(argv, ScratchDir("fault_proxy") + "/proxy.log");
  p->endpoint_ = "http://127.0.0.1:" + std::to_string(port);
  CKPT_RETURN_IF_ERROR(WaitPort(port, p->pid_, "fault_proxy.py", 10));
  return p;
}

FaultProxy::~FaultProxy() { KillGroup(&pid_); }

}  // namespace ckpt::testing
