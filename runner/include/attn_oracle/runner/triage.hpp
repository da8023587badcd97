// triage.hpp: what a property's failing draws amount to, so that the first run
// shows the bug that matters.
//
// A backend that does not take a whole class of inputs (a side with no tokens,
// vmapped extra dims: input_class.hpp) fails on many draws, each with a
// different field or message. Counted one signature at a time, those shallow
// failures would fill every slot before the draw that shows a wrong answer on
// an ordinary input. So the runner keeps every failing draw of the budget and
// triage clusters them by root:
//  - a wrong answer whose shrunk case is in an input class: one cluster per
//    class, whatever field or side differs;
//  - a wrong answer on an ordinary input: one cluster per failure signature;
//  - an exception or a rejection of a valid input: by its message with the
//    values folded; a crash or hang: by how it ended.
// Clusters rank in that order reversed: wrong answers on ordinary inputs first,
// then wrong answers on input classes, then exceptions, then crashes. The first
// `shown` clusters with a shrunk counterexample are shown in full; the rest get
// one line each with their count. Shrinking is bounded: at most `shown` draws
// that look ordinary and `shown` that do not are shrunk per property, and a
// shrink stays with its root (the same check failing the same way, no input
// class the drawn case did not have), so a deep bug never shrinks into a
// shallow class nor into another bug.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "attn_oracle/seam/backend.hpp"
#include "attn_oracle/cases/case_file.hpp"
#include "attn_oracle/model/input_class.hpp"

namespace attn_oracle::inline runner {

enum class FailureKind { wrong_answer, exception, crash };
// A check's message read as one of the three: "exception: ...", "the worker's
// backend raised ...", "backend rejected a valid input: ..." are exceptions;
// a crash or hang of the backend or its worker is a crash.
FailureKind failure_kind(const std::string& message);

enum class FailureRank { wrong_on_ordinary_input, wrong_on_input_class, exception, crash };
std::string_view to_string(FailureRank rank);  // "wrong answer on ordinary inputs", ...

// The input classes of a case's packed batch; none for an op without one (kv_buffer).
std::vector<InputClass> input_classes_of(const Case& c);

struct FailureCluster {
  std::string key;  // "input class: a side with no tokens", "wrong answer: q_seqlens[#]", "exception: ...", "crash: SIGSEGV"
  FailureRank rank = FailureRank::wrong_on_ordinary_input;
  std::optional<InputClass> input_class;  // of its shrunk case, or of a drawn one when none was shrunk
  std::string decline;  // the one line the backend could add to decline the class, when there is one
  int draws = 0;        // failing draws in it
  int first_draw = 0;
  std::string example;         // a message of it (the shrunk one when shrunk)
  std::string counterexample;  // its case file, when one was shrunk
  bool shown = false;          // shown in full (PropertyOutcome::failures)
  bool stored = false;         // its failure came from the failure store (failure_store.hpp)
  bool operator==(const FailureCluster&) const = default;
};

// One line: "wrong answer on an input class (a side with no tokens), 31 draws from draw 2".
std::string cluster_line(const FailureCluster& c);

// The streaming half, used by the runner draw by draw.
class Triage {
 public:
  struct Draw {
    int draw = 0;
    FailureKind kind = FailureKind::wrong_answer;
    std::vector<InputClass> classes;  // of the drawn (unshrunk) case
    std::string group;                // kind, signature and classes: draws alike before shrinking
    std::string message;
  };

  // `shown`: clusters shown in full; `known`: groups an earlier process of this
  // run shrank already (isolation.hpp), never shrunk again; `decline_hook`:
  // how the backend would write a decline (decline_line).
  Triage(int shown, std::set<std::string> known, std::string backend, Capability capability);

  Draw classify(int draw, const std::string& message, const Case* drawn) const;
  // Counts the draw; true when it opens a group that is worth shrinking now.
  bool take(const Draw& d);
  // Whether a shrink candidate (its message and case) stays with the draw's root.
  bool same_root(const Draw& d, const std::string& message, const Case& candidate) const;
  // The shrunk failure of a group: its cluster. False when that cluster already
  // has one (the failure is merged into it and not kept).
  bool place(const Draw& d, const std::string& shrunk_message, const Case& shrunk);
  // A failure shrunk before this run (the failure store's): its cluster, with
  // no draw counted; its group is never shrunk again. Returns the cluster's key.
  std::string adopt(const std::string& message, const Case& counterexample, const std::string& case_path);
  // Attaches the kept failure's case file to its cluster.
  void attach(const std::string& cluster, const std::string& case_path);
  const std::string& last_cluster() const { return last_cluster_; }
  std::vector<FailureCluster> clusters() const;

 private:
  FailureCluster& cluster_for(const std::string& key, FailureRank rank, std::optional<InputClass> cls, int draw);
  std::string place_in_cluster(const Draw& d, const std::string& message, const Case& shrunk, bool count_draw);
  int shown_;
  std::set<std::string> known_;
  std::string backend_;
  Capability capability_;
  std::map<std::string, std::string> group_cluster_;  // group -> cluster key
  std::map<std::string, FailureCluster> clusters_;
  std::set<std::string> with_failure_;
  int ordinary_shrinks_ = 0, other_shrinks_ = 0;
  std::string last_cluster_;
};

// The same case with one input class taken out, where that is a plain
// transformation of a metadata batch: the broadcast slices of vmapped extra
// dims stacked as rows, then each slice alone; each row of a batch with an
// empty side alone. A shrunk failure
// that still fails the same way on one of them did not need the class: it is
// clustered as what it is (the runner tries these after shrinking).
std::vector<Case> out_of_input_classes(const Case& c);

// Each row of a metadata batch of several rows (and no extra dims) alone.
// RapidCheck drops rows from the end, so a failure that a later row carries
// keeps the rows before it, however small they shrink; the runner tries these
// after shrinking and keeps the first that fails with the same root.
std::vector<Case> single_rows(const Case& c);

// A one-row metadata batch (no extra dims) without each of its documents in
// turn: its tokens taken out of both sides. Tried after single_rows, which
// leaves the row as it was drawn in a batch where it could not drop a document
// (under a mask without padding, a shorter row grows its last document).
std::vector<Case> without_each_document(const Case& c);

// The decline a backend named `backend` would add to its `capability` hook to
// decline `c`, in its own language: C++ for a linked backend, Python for an
// attn_oracle.worker, the protocol's words for another worker.
std::string decline_line(const std::string& backend, Capability capability, InputClass c);

// The cluster of a failure known only by its message (a crash the supervising
// process shrank, a failure a crashed child reported).
FailureCluster cluster_of_message(const std::string& message, int draw);

// The group of a failure (its kind, signature and the case's input classes):
// the failure store's cases and a resumed child's known failures are named by it.
std::string failure_group(const std::string& message, const Case* c);
// Adds `add`'s clusters into `into` by key (draws summed).
void merge_clusters(std::vector<FailureCluster>& into, const std::vector<FailureCluster>& add);

// "q_offsets of row #" for "q_offsets of row 3: backend 1, expected 2": what
// tells two failures of a property apart.
std::string failure_signature(const std::string& message);

// Text with every number as "#": "head_dim 96" and "head_dim 40" read alike.
std::string blank_numbers(const std::string& text);

}  // namespace attn_oracle::runner
