#include "bootstrap/store_handshake.hpp"

#include "core/auth.hpp"
#include "core/text.hpp"

namespace braid::store_protocol {

bool is_member_token(std::span<const std::byte> member, std::span<const std::byte> seal) {
  return !seal.empty() && member.size() == seal.size() && same_digest(member, seal);
}

Reply ServerHandshake::answer(const Request& r, std::span<const std::byte> frame, bool sealed,
                              std::span<const std::byte> seal) {
  if (phase_ == Phase::done)
    throw ProtocolMismatch(cat("a ", name_of(r.op), " request to a handshake that is already done"));
  if (phase_ == Phase::hello) {
    if (r.op != Op::hello)
      throw ProtocolMismatch(cat("a ", name_of(r.op), " request before the handshake (a braid store client "
                                 "opens with hello; is it an older braid?)"));
    claimed_rank_ = r.rank;
    same_job_ = r.job == job_;
    if (!same_job_)
      throw OtherJob(cat("this store serves another job than the client's (job id '", r.job.empty() ? "(none)" : r.job,
                         "'): two jobs share the store address. Give each job its own store address (port), "
                         "or start every rank of one job with the same BRAID_JOB_ID"));
    if (sealed && !is_member_token(r.member, seal))
      throw Sealed("the communicator this store serves has already formed, so no rank can join it any more: a "
                   "previous run's store is still up at this address, or this rank was restarted (a braid "
                   "communicator cannot be rejoined, but for an elastic job's by Comm::join: BRAID_ELASTIC=1 on "
                   "the rank hosting the store; else restart the whole job)");
    if (key_.enabled() && !r.auth)
      throw AuthRefused("authentication required: this store has a key (BRAID_AUTH_KEY or BRAID_AUTH_KEY_FILE) "
                        "and the client has none");
    if (!key_.enabled() && r.auth)
      throw AuthRefused("the client sent an authenticated hello but this store has no key (BRAID_AUTH_KEY or "
                        "BRAID_AUTH_KEY_FILE is set in some processes of the job only)");
    if (!key_.enabled()) {
      phase_ = Phase::done;
      return Reply{.op = Op::hello};
    }
    server_nonce_ = random_nonce();
    hello_frame_.assign(frame.begin(), frame.end());
    phase_ = Phase::proof;
    return Reply{.op = Op::hello, .challenge = true, .nonce = server_nonce_};
  }
  if (r.op != Op::auth)
    throw ProtocolMismatch(cat("a ", name_of(r.op), " request where the authentication proof belongs"));
  Digest expected = handshake_proof(key_, AuthRole::client, kAuthProtocol, r.nonce, server_nonce_, hello_frame_);
  if (!same_digest(r.proof, expected))
    throw AuthRefused("authentication failed: the proof of the shared key is wrong (the client holds another key, "
                      "or replayed an old proof)");
  phase_ = Phase::done;
  Reply reply{.op = Op::auth,
              .proof = handshake_proof(key_, AuthRole::server, kAuthProtocol, r.nonce, server_nonce_, hello_frame_)};
  Bytes().swap(hello_frame_);
  return reply;
}

}  // namespace braid::store_protocol
