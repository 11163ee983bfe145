// Model-family registry and the metadata -> family resolution (family.h).
#include "reshard/family.h"

#include <map>
#include <mutex>

#include "reshard/megatron_family.h"

namespace ckpt::reshard {
namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<const ModelFamily>, std::less<>> by_name;
};

// Built-in families are registered on first use, so that no static
// initialiser order (or a linker dropping an unreferenced object) matters.
Registry& TheRegistry() {
  static Registry* r = [] {
    auto* reg = new Registry;  // never destroyed: families outlive every caller
    std::shared_ptr<const ModelFamily> gpt = MegatronGptFamily();
    reg->by_name.emplace(std::string(gpt->name()), gpt);
    return reg;
  }();
  return *r;
}

std::string Names(const Registry& r) {
  std::string s;
  for (const auto& [n, f] : r.by_name) s += (s.empty() ? "" : ", ") + n;
  return s;
}

}  // namespace

Status RegisterModelFamily(std::shared_ptr<const ModelFamily> family) {
  if (!family || family->name().empty()) return Status::InvalidArgument("model family: null or unnamed");
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  const std::string name(family->name());
  if (!r.by_name.emplace(name, std::move(family)).second)
    return Status::AlreadyExists("model family '" + name + "' is already registered");
  return Status::Ok();
}

const ModelFamily* FindModelFamily(std::string_view name) {
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.by_name.find(name);
  return it == r.by_name.end() ? nullptr : it->second.get();
}

std::vector<std::string> ModelFamilyNames() {
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> out;
  for (const auto& [n, f] : r.by_name) out.push_back(n);
  return out;
}

Result<std::optional<ModelRef>> ModelOf(const nlohmann::json& metadata) {
  if (!metadata.is_object()) return std::optional<ModelRef>();
  std::string name;
  nlohmann::json config;
  const auto model = metadata.find("model");
  if (model != metadata.end() && model->is_object()) {
    if (!model->contains("family") || !(*model)["family"].is_string())
      return Status::InvalidArgument("metadata \"model\": no string \"family\"");
    name = (*model)["family"].get<std::string>();
    config = model->value("config", nlohmann::json::object());
  } else if (metadata.contains("gpt") && metadata["gpt"].is_object()) {
    name = kMegatronGptFamily;  // written before the seam: "model" is the preset's name
    config = metadata["gpt"];
  } else {
    return std::optional<ModelRef>();
  }
  const ModelFamily* f = FindModelFamily(name);
  if (!f) {
    Registry& r = TheRegistry();
    std::lock_guard<std::mutex> lock(r.mu);
    return Status::NotFound("model family '" + name + "' is not registered (registered: " + Names(r) + ")");
  }
  CKPT_ASSIGN_OR_RETURN(nlohmann::json canonical, f->ParseConfig(config));
  return std::optional<ModelRef>(ModelRef{f, std::move(canonical)});
}

nlohmann::json ModelMetadata(const ModelFamily& family, const nlohmann::json& config) {
  return {{"family", std::string(family.name())}, {"config", config}};
}

}  // namespace ckpt::reshard
