#include "modelfs/tree.hpp"

#include <algorithm>
#include <array>
#include <unordered_map>
#include <unordered_set>

#include "modelfs/json_text.hpp"
#include "modelfs/naming.hpp"
#include "modelfs/npy.hpp"
#include "modelfs/sidecar.hpp"

namespace modelfs {

size_t Node::slice(uint64_t offset, uint64_t length, std::span<iovec, kMaxSegments> out) const {
  size_t count = 0;
  uint64_t segment_start = 0;
  for (const auto& segment : segments) {
    if (length == 0 || count == out.size()) break;
    const uint64_t segment_end = segment_start + segment.size();
    if (offset < segment_end) {
      const uint64_t within = offset - segment_start;
      const uint64_t take = std::min(length, segment.size() - within);
      out[count++] = iovec{const_cast<std::byte*>(segment.data() + within), take};
      offset += take;
      length -= take;
    }
    segment_start = segment_end;
  }
  return count;
}

class TreeBuilder {
 public:
  TreeBuilder(Tree& tree, const TreeOptions& options) : tree_(tree), options_(options) {}

  void build() {
    auto& nodes = tree_.nodes_;
    Node root;
    root.kind = NodeKind::Directory;
    root.nlink = 2;
    nodes.push_back(std::move(root));
    const uint64_t meta_dir = directory(Tree::kRootIno, ".modelfs");

    // Folders first, so that a tensor file never takes a folder's name:
    // the folder keeps it and the file gets a "~N" suffix.
    const auto& tensors = tree_.catalog_.tensors;
    std::vector<std::vector<std::string>> components(tensors.size());
    std::vector<uint64_t> folder_of(tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      components[i] = tensor_path_components(tensors[i].name, options_.flat);
      folder_of[i] = directories_for(components[i]);
    }
    tree_.tensor_paths_.reserve(tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i)
      add_tensor(tensors[i], components[i], folder_of[i]);

    add_documents(meta_dir);
    for (auto& node : nodes) {
      if (node.kind != NodeKind::Directory) continue;
      std::sort(node.children.begin(), node.children.end(),
                [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
    }
  }

 private:
  Node& node(uint64_t ino) { return tree_.nodes_[ino - 1]; }

  uint64_t add_node(uint64_t parent, const std::string& name, Node node_value) {
    node_value.parent = parent;
    tree_.nodes_.push_back(std::move(node_value));
    const uint64_t ino = tree_.nodes_.size();
    auto& children = node(parent).children;
    children.push_back({name, ino});
    if (auto names = big_folder_names_.find(parent); names != big_folder_names_.end())
      names->second.insert(name);
    else if (children.size() >= kBigFolder) {
      auto& names_of_parent = big_folder_names_[parent];
      for (const auto& entry : children) names_of_parent.insert(entry.name);
    }
    return ino;
  }

  // Whether `dir` already holds `name`: a scan while the folder is small (a
  // tensor's folder holds a few files), a set once it is big.
  bool is_taken(uint64_t dir, const std::string& name) {
    if (auto names = big_folder_names_.find(dir); names != big_folder_names_.end())
      return names->second.count(name) != 0;
    for (const auto& entry : node(dir).children)
      if (entry.name == name) return true;
    return false;
  }

  uint64_t directory(uint64_t parent, const std::string& name) {
    Node dir;
    dir.kind = NodeKind::Directory;
    dir.nlink = 2;
    const uint64_t ino = add_node(parent, name, std::move(dir));
    node(parent).nlink++;
    return ino;
  }

  // The folders of a tensor's path, made as needed; returns the innermost.
  // Consecutive tensors mostly share folders (model.layers.3.*), so the
  // previous tensor's chain is reused as far as it matches, and the map of
  // folder paths is consulted only past that.
  uint64_t directories_for(const std::vector<std::string>& parts) {
    const size_t depth = parts.empty() ? 0 : parts.size() - 1;
    size_t same = 0;
    while (same < depth && same < chain_names_.size() && chain_names_[same] == parts[same]) ++same;
    chain_names_.resize(same);
    chain_inos_.resize(same);
    uint64_t parent = same ? chain_inos_.back() : Tree::kRootIno;
    std::string path = same ? chain_paths_[same - 1] : std::string();
    chain_paths_.resize(same);
    for (size_t i = same; i < depth; ++i) {
      if (i) path += '/';
      path += parts[i];
      auto it = dir_paths_.find(path);
      if (it == dir_paths_.end()) it = dir_paths_.emplace(path, directory(parent, parts[i])).first;
      parent = it->second;
      chain_names_.push_back(parts[i]);
      chain_inos_.push_back(parent);
      chain_paths_.push_back(path);
    }
    return parent;
  }

  // The first of base, base~1, base~2, ... whose file names are all free.
  std::string free_name(uint64_t dir, const std::string& base, bool with_npy) {
    auto is_free = [&](const std::string& name) {
      return !is_taken(dir, name) && !is_taken(dir, name + ".json") &&
             (!with_npy || !is_taken(dir, name + ".npy"));
    };
    if (is_free(base)) return base;
    for (uint64_t n = 1;; ++n) {
      std::string candidate = base + "~" + std::to_string(n);
      if (is_free(candidate)) return candidate;
    }
  }

  uint64_t add_file(uint64_t dir, const std::string& name, FileRole role,
                    std::vector<ByteSpan> segments, const Tensor* tensor) {
    Node file;
    file.role = role;
    file.tensor = tensor;
    for (const auto& s : segments) file.size += s.size();
    file.segments = std::move(segments);
    return add_node(dir, name, std::move(file));
  }

  void add_tensor(const Tensor& tensor, const std::vector<std::string>& parts, uint64_t dir) {
    std::string dir_path;
    for (size_t i = 0; i + 1 < parts.size(); ++i) dir_path += (i ? "/" : "") + parts[i];

    auto descr = numpy_descr(tensor.dtype);
    const bool c_order = tensor.c_order.has_value() || tensor.is_c_contiguous();
    const bool npy = descr && (c_order || tensor.is_f_contiguous());
    const std::string name = free_name(dir, parts.back(), npy);
    tree_.tensor_paths_.push_back(dir_path.empty() ? name : dir_path + "/" + name);

    add_file(dir, name, FileRole::TensorData, {tensor.bytes}, &tensor);
    const uint64_t sidecar = add_file(dir, name + ".json", FileRole::Sidecar, {}, &tensor);
    node(sidecar).size = sidecar_text(tensor, tree_.catalog_.format).size();
    if (npy)
      add_file(dir, name + ".npy", FileRole::NpyView,
               {shared_npy_header(npy_header(*descr, tensor.shape, !c_order)),
                tensor.c_order ? *tensor.c_order : tensor.bytes},
               &tensor);
    tree_.total_bytes_ += tensor.bytes.size();
  }

  // Tensors of one dtype and shape share one .npy header: a model's layers
  // repeat a few shapes, and 100 000 copies of a 128-byte header add up.
  ByteSpan shared_npy_header(std::string header) {
    auto it = npy_headers_.find(header);
    if (it == npy_headers_.end()) {
      ByteSpan bytes = ByteSpan::owned(header);
      it = npy_headers_.emplace(std::move(header), std::move(bytes)).first;
    }
    return it->second;
  }

  void add_document(uint64_t meta_dir, const std::string& relative_path, std::string content) {
    std::vector<std::string> parts;
    size_t start = 0;
    for (size_t i = 0; i <= relative_path.size(); ++i) {
      if (i == relative_path.size() || relative_path[i] == '/') {
        parts.push_back(escape_component(std::string_view(relative_path).substr(start, i - start)));
        start = i + 1;
      }
    }
    uint64_t dir = meta_dir;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      auto existing = std::find_if(node(dir).children.begin(), node(dir).children.end(),
                                   [&](const DirEntry& e) { return e.name == parts[i]; });
      if (existing != node(dir).children.end() && node(existing->ino).kind == NodeKind::Directory)
        dir = existing->ino;
      else
        dir = directory(dir, free_name(dir, parts[i], false));
    }
    add_file(dir, free_name(dir, parts.back(), false), FileRole::Document,
             {ByteSpan::owned(std::move(content))}, nullptr);
  }

  void add_documents(uint64_t meta_dir) {
    const auto& catalog = tree_.catalog_;
    // index.json, as readable_json would print it, one line per tensor,
    // printed directly (it is the largest document of a big model).
    std::string index = "{\n  \"format\": ";
    append_json_string(index, catalog.format);
    index += ",\n  \"files\": [";
    for (size_t i = 0; i < catalog.files.size(); ++i) {
      if (i) index += ',';
      append_json_string(index, catalog.files[i]);
    }
    index += "],\n  \"tensors\": ";
    index += catalog.tensors.empty() ? "[]" : "[\n";
    for (size_t i = 0; i < catalog.tensors.size(); ++i) {
      const auto& t = catalog.tensors[i];
      index += "    {\"name\":";
      append_json_string(index, t.name);
      index += ",\"path\":";
      append_json_string(index, tree_.tensor_paths_[i]);
      index += ",\"dtype\":";
      append_json_string(index, t.dtype_name());
      index += ",\"shape\":";
      append_json_array(index, t.shape);
      index += ",\"nbytes\":" + std::to_string(t.bytes.size());
      index += i + 1 < catalog.tensors.size() ? "},\n" : "}\n  ]";
    }
    index += "\n}\n";
    add_document(meta_dir, "index.json", std::move(index));

    nlohmann::ordered_json metadata;
    metadata["format"] = catalog.format;
    metadata["files"] = catalog.files;
    for (const auto& [key, value] : catalog.metadata.items()) metadata[key] = value;
    add_document(meta_dir, "metadata.json", readable_json(metadata));

    for (const auto& document : catalog.documents)
      add_document(meta_dir, document.path, document.content);
  }

  Tree& tree_;
  const TreeOptions& options_;
  std::unordered_map<std::string, uint64_t> dir_paths_;
  // Folders with at least kBigFolder entries get a set of their names.
  static constexpr size_t kBigFolder = 16;
  std::unordered_map<uint64_t, std::unordered_set<std::string>> big_folder_names_;
  // The previous tensor's folders: names, inodes and paths, outermost first.
  std::vector<std::string> chain_names_;
  std::vector<uint64_t> chain_inos_;
  std::vector<std::string> chain_paths_;
  std::unordered_map<std::string, ByteSpan> npy_headers_;
};

std::unique_ptr<const Tree> Tree::build(Catalog catalog, const TreeOptions& options) {
  std::unique_ptr<Tree> tree(new Tree());
  tree->catalog_ = std::move(catalog);
  // Three files per tensor plus folders: reserving avoids the copies (and
  // the freed blocks left behind) of a table growing by doubling.
  tree->nodes_.reserve(tree->catalog_.tensors.size() * 3 + 64);
  TreeBuilder(*tree, options).build();
  return tree;
}

size_t Tree::read(const Node& file, uint64_t offset, uint64_t length,
                  std::span<iovec, Node::kMaxSegments> out, std::string& scratch) const {
  if (file.role != FileRole::Sidecar || file.tensor == nullptr) return file.slice(offset, length, out);
  scratch = sidecar_text(*file.tensor, catalog_.format);
  if (offset >= scratch.size()) return 0;
  out[0] = iovec{scratch.data() + offset, std::min<uint64_t>(length, scratch.size() - offset)};
  return 1;
}

std::string Tree::content(const Node& file) const {
  std::array<iovec, Node::kMaxSegments> iov{};
  std::string scratch;
  std::string out;
  const size_t n = read(file, 0, file.size, iov, scratch);
  for (size_t i = 0; i < n; ++i) out.append(static_cast<const char*>(iov[i].iov_base), iov[i].iov_len);
  return out;
}

std::optional<uint64_t> Tree::lookup(uint64_t parent, std::string_view name) const {
  const Node* dir = node(parent);
  if (dir == nullptr || dir->kind != NodeKind::Directory) return std::nullopt;
  auto it = std::lower_bound(dir->children.begin(), dir->children.end(), name,
                             [](const DirEntry& e, std::string_view n) { return e.name < n; });
  if (it == dir->children.end() || it->name != name) return std::nullopt;
  return it->ino;
}

std::optional<uint64_t> Tree::resolve(std::string_view path) const {
  uint64_t ino = kRootIno;
  size_t start = 0;
  while (start < path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    auto next = lookup(ino, path.substr(start, end - start));
    if (!next) return std::nullopt;
    ino = *next;
    start = end + 1;
  }
  return ino;
}

}  // namespace modelfs
