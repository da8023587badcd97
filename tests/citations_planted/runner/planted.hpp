// planted.hpp: a planted file for ctest contract_citations.planted (tests/citations_planted/README.md).
// A misspelt title: the metadata of docs/semantics.md#3-metadta.
// A bare number across a line break: the sharded attention of docs/semantics.md
// section 9.
