// planted_op.cpp: a planted file for ctest contract_citations.planted (tests/citations_planted/README.md).
// Cited right: floats by the tolerance rule of docs/semantics.md#6-tolerance.
// Wrong number under the right title: the tolerance rule of docs/semantics.md#5-tolerance.
// A bare number: the error codes of docs/semantics.md section 4.
// A number with no page: the mask of section 2.
