// The storage conformance suite over OpenStorage("s3://...") on Ceph radosgw
// (a real S3 implementation: signatures checked, If-None-Match honoured).
#define CKPT_S3_CONFORMANCE_RADOSGW 1
#include "s3_conformance_test.cc"
