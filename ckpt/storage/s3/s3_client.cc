#include "ckpt/storage/s3/s3_client.h"

#include "ckpt/storage/s3/s3_xml.h"

namespace ckpt::s3 {
namespace {

std::string ObjPath(const std::string& bucket, const std::string& key) {
  return "/" + EncodeQuery(bucket) + "/" + EncodeKey(key);
}

std::span<const std::byte> Bytes(const std::string& s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

HttpRequest Req(std::string method, std::string path, std::span<const std::byte> body = {}) {
  HttpRequest r;
  r.method = std::move(method);
  r.path = std::move(path);
  r.body = body;
  return r;
}

}  // namespace

Result<HttpResponse> S3Client::Call(HttpRequest req) {
  CKPT_ASSIGN_OR_RETURN(HttpResponse resp, http_.Do(req));
  if (resp.status < 200 || resp.status >= 300) return http_.ErrorFor(req, resp);
  return resp;
}

Status S3Client::CreateBucket(const std::string& bucket) {
  HttpRequest req = Req("PUT", "/" + EncodeQuery(bucket));
  CKPT_ASSIGN_OR_RETURN(HttpResponse resp, http_.Do(req));
  if (resp.status >= 200 && resp.status < 300) return Status::Ok();
  if (XmlFirst(resp.body, "Code") == "BucketAlreadyOwnedByYou") return Status::Ok();
  return http_.ErrorFor(req, resp);
}

Status S3Client::PutObject(const std::string& bucket, const std::string& key, std::span<const std::byte> data,
                           bool if_none_match, const std::map<std::string, std::string>& meta) {
  HttpRequest req = Req("PUT", ObjPath(bucket, key), data);
  if (if_none_match) req.headers.push_back("If-None-Match: *");
  for (const auto& [name, value] : meta) req.headers.push_back("x-amz-meta-" + name + ": " + value);
  return Call(std::move(req)).status();
}

Result<std::string> S3Client::GetObject(const std::string& bucket, const std::string& key) {
  CKPT_ASSIGN_OR_RETURN(HttpResponse resp, Call(Req("GET", ObjPath(bucket, key))));
  return std::move(resp.body);
}

Status S3Client::GetRange(const std::string& bucket, const std::string& key, uint64_t offset,
                          std::span<std::byte> dst) {
  if (dst.empty()) return Status::Ok();
  if (offset == 0 && dst.size() == 1) {
    // "bytes=0-0" is a whole object on s3rver (it reads an end of 0 as
    // none); ask for two bytes, which every server answers right.
    std::byte two[2];
    HttpRequest req = Req("GET", ObjPath(bucket, key));
    req.has_range = true;
    req.range_len = 2;
    req.sink = std::span<std::byte>(two, 2);
    CKPT_ASSIGN_OR_RETURN(HttpResponse resp, Call(req));
    if (resp.sink_bytes < 1)
      return Status::Corruption("s3 GET " + http_.UrlFor(req.path) + ": asked for 1 byte at offset 0, got none");
    dst[0] = two[0];
    return Status::Ok();
  }
  HttpRequest req = Req("GET", ObjPath(bucket, key));
  req.has_range = true;
  req.range_begin = offset;
  req.range_len = dst.size();
  req.sink = dst;
  CKPT_ASSIGN_OR_RETURN(HttpResponse resp, Call(req));
  if (resp.sink_bytes != dst.size())
    return Status::Corruption("s3 GET " + http_.UrlFor(req.path) + ": asked for " + std::to_string(dst.size()) +
                              " bytes at offset " + std::to_string(offset) + ", got " +
                              std::to_string(resp.sink_bytes) + " (HTTP " + std::to_string(resp.status) + ")");
  return Status::Ok();
}

Result<ObjectInfo> S3Client::Head(const std::string& bucket, const std::string& key) {
  CKPT_ASSIGN_OR_RETURN(HttpResponse resp, Call(Req("HEAD", ObjPath(bucket, key))));
  return ObjectInfo{key, static_cast<uint64_t>(std::max<int64_t>(resp.content_length, 0)), resp.etag, resp.meta};
}

Result<std::vector<ObjectInfo>> S3Client::List(const std::string& bucket, const std::string& prefix) {
  std::vector<ObjectInfo> out;
  std::string token;
  for (int page = 0; page < 100000; ++page) {
    // Query parameters in SigV4 canonical (sorted) order.
    std::string q = token.empty() ? "" : "continuation-token=" + EncodeQuery(token) + "&";
    q += "list-type=2&prefix=" + EncodeQuery(prefix);
    CKPT_ASSIGN_OR_RETURN(HttpResponse resp, Call(Req("GET", "/" + EncodeQuery(bucket) + "?" + q)));
    for (std::string_view c : XmlAll(resp.body, "Contents")) {
      out.push_back({XmlFirst(c, "Key"), std::stoull("0" + XmlFirst(c, "Size")), XmlFirst(c, "ETag"), {}});
    }
    if (XmlFirst(resp.body, "IsTruncated") != "true") return out;
    token = XmlFirst(resp.body, "NextContinuationToken");
    if (token.empty()) return Status::Corruption("s3 list " + bucket + "/" + prefix + ": truncated page without a token");
  }
  return Status::Internal("s3 list " + bucket + "/" + prefix + ": too many pages");
}

Status S3Client::Delete(const std::string& bucket, const std::string& key) {
  HttpRequest req = Req("DELETE", ObjPath(bucket, key));
  CKPT_ASSIGN_OR_RETURN(HttpResponse resp, http_.Do(req));
  if ((resp.status >= 200 && resp.status < 300) || resp.status == 404) return Status::Ok();
  return http_.ErrorFor(req, resp);
}

Result<std::string> S3Client::CreateMultipart(const std::string& bucket, const std::string& key) {
  CKPT_ASSIGN_OR_RETURN(HttpResponse resp, Call(Req("POST", ObjPath(bucket, key) + "?uploads=")));
  std::string id = XmlFirst(resp.body, "UploadId");
  if (id.empty()) return Status::Corruption("s3 POST " + http_.UrlFor(ObjPath(bucket, key)) + "?uploads: no UploadId");
  return id;
}

Result<std::string> S3Client::UploadPart(const std::string& bucket, const std::string& key,
                                         const std::string& upload_id, int part_number,
                                         std::span<const std::byte> data) {
  const std::string path = ObjPath(bucket, key) + "?partNumber=" + std::to_string(part_number) +
                           "&uploadId=" + EncodeQuery(upload_id);
  CKPT_ASSIGN_OR_RETURN(HttpResponse resp, Call(Req("PUT", path, data)));
  if (resp.etag.empty())
    return Status::Corruption("s3 PUT " + http_.UrlFor(path) + " part " + std::to_string(part_number) + ": no ETag");
  return resp.etag;
}

Status S3Client::CompleteMultipart(const std::string& bucket, const std::string& key, const std::string& upload_id,
                                   const std::vector<CompletedPart>& parts) {
  std::string xml = "<CompleteMultipartUpload>";
  for (const auto& p : parts)
    xml += "<Part><PartNumber>" + std::to_string(p.number) + "</PartNumber><ETag>" + XmlEscape(p.etag) +
           "</ETag></Part>";
  xml += "</CompleteMultipartUpload>";
  const std::string path = ObjPath(bucket, key) + "?uploadId=" + EncodeQuery(upload_id);
  HttpRequest req = Req("POST", path, Bytes(xml));
  CKPT_ASSIGN_OR_RETURN(HttpResponse resp, Call(req));
  // S3 may answer 200 and put the failure in the body.
  if (XmlAll(resp.body, "Error").size() > 0) {
    resp.status = 500;
    return http_.ErrorFor(req, resp);
  }
  return Status::Ok();
}

Status S3Client::AbortMultipart(const std::string& bucket, const std::string& key, const std::string& upload_id) {
  HttpRequest req = Req("DELETE", ObjPath(bucket, key) + "?uploadId=" + EncodeQuery(upload_id));
  CKPT_ASSIGN_OR_RETURN(HttpResponse resp, http_.Do(req));
  if ((resp.status >= 200 && resp.status < 300) || resp.status == 404) return Status::Ok();
  return http_.ErrorFor(req, resp);
}

Result<std::vector<UploadInfo>> S3Client::ListMultipart(const std::string& bucket, const std::string& prefix) {
  std::vector<UploadInfo> out;
  std::string key_marker, id_marker;
  for (int page = 0; page < 100000; ++page) {
    std::string q = key_marker.empty() ? "" : "key-marker=" + EncodeQuery(key_marker) + "&";
    q += "prefix=" + EncodeQuery(prefix);
    if (!id_marker.empty()) q += "&upload-id-marker=" + EncodeQuery(id_marker);
    q += "&uploads=";
    CKPT_ASSIGN_OR_RETURN(HttpResponse resp, Call(Req("GET", "/" + EncodeQuery(bucket) + "?" + q)));
    for (std::string_view u : XmlAll(resp.body, "Upload")) out.push_back({XmlFirst(u, "Key"), XmlFirst(u, "UploadId")});
    if (XmlFirst(resp.body, "IsTruncated") != "true") return out;
    key_marker = XmlFirst(resp.body, "NextKeyMarker");
    id_marker = XmlFirst(resp.body, "NextUploadIdMarker");
    if (key_marker.empty()) return out;
  }
  return Status::Internal("s3 list uploads " + bucket + "/" + prefix + ": too many pages");
}

Result<bool> S3Client::SupportsConditionalPut(const std::string& bucket, const std::string& probe_key) {
  static const std::string kProbe = "ckpt conditional-write probe";
  CKPT_RETURN_IF_ERROR(Delete(bucket, probe_key));
  CKPT_RETURN_IF_ERROR(PutObject(bucket, probe_key, Bytes(kProbe), true));
  Status second = PutObject(bucket, probe_key, Bytes(kProbe), true);
  Delete(bucket, probe_key).IgnoreError();
  if (second.ok()) return false;
  if (second.code() == Code::kAlreadyExists) return true;
  return second;
}

}  // namespace ckpt::s3
