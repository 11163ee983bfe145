// The one wire form of a Status between ranks, and of "a payload or a failure"
// (an Outcome) - every protocol message that says "ok or error" uses these.
//
// EncodeStatus keeps all typed fields: code, cause, origin rank, phase, message.
// Decoding is checked: bytes that are not such a form decode to kInternal
// naming them (never to OK, never an exception), so a peer's garbled or
// hostile message cannot pass for success or crash the receiver.
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ckpt/base/status.h"

namespace ckpt {

// 'S', code (1 byte), cause code (1 byte; cause() - the relayed failure's
// code, or the code itself), origin rank (int32 LE), phase length (uint32 LE),
// phase, message. OK encodes as a Status with code kOk. A Status with missing peers
// is prefixed by 'M', count (uint32 LE), per peer rank (int32 LE) and host
// (uint32 LE length, bytes), then the phase (uint32 LE length, bytes).
std::string EncodeStatus(const Status& s);
Status DecodeStatus(std::string_view wire);

// An outcome: 'O' + payload, or 'E' + EncodeStatus(failure) (failure not OK).
std::string EncodeOutcome(std::string_view payload);
std::string EncodeFailure(const Status& failure);
// The payload of an 'O' message, or the failure of an 'E' one; anything else
// (or an 'E' holding OK) is kInternal naming the message as malformed.
// (Which rank's failure all ranks report: AgreeOutcomes, agree.h.)
Result<std::string> DecodeOutcome(std::string_view wire);

}  // namespace ckpt
