# Writes OUTPUT, a C file defining db_migrations[] and db_nmigrations
# (store/migrate.h), from MIGRATIONS_DIR/NNN_name.sql, ordered by NNN.
#
#   cmake -DMIGRATIONS_DIR=dir -DOUTPUT=file.c -P embed_migrations.cmake
#
# Each file becomes a NUL-terminated byte array (cmake/embed.cmake), so no
# character in the SQL needs escaping.
include(${CMAKE_CURRENT_LIST_DIR}/../cmake/embed.cmake)
if(NOT MIGRATIONS_DIR OR NOT OUTPUT)
  message(FATAL_ERROR "usage: cmake -DMIGRATIONS_DIR=dir -DOUTPUT=file.c -P embed_migrations.cmake")
endif()

file(GLOB files RELATIVE "${MIGRATIONS_DIR}" "${MIGRATIONS_DIR}/*.sql")
list(SORT files COMPARE NATURAL)

set(arrays "")
set(entries "")
set(count 0)
set(previous -1)
foreach(f IN LISTS files)
  if(NOT f MATCHES "^([0-9]+)_([A-Za-z0-9_]+)\\.sql$")
    message(FATAL_ERROR "migrations/${f}: a migration is named NNN_name.sql "
                        "(digits, an underscore, then letters, digits and underscores)")
  endif()
  set(name "${CMAKE_MATCH_2}")
  string(REGEX REPLACE "^0+([0-9])" "\\1" version "${CMAKE_MATCH_1}")
  if(version LESS_EQUAL previous)
    message(FATAL_ERROR "migrations/${f}: version ${version} is used twice")
  endif()
  set(previous ${version})

  ss_embed_array(arrays "${MIGRATIONS_DIR}/${f}" "migrations/${f}" "static const char sql_${count}")
  string(APPEND entries "    {${version}, \"${name}\", sql_${count}},\n")
  math(EXPR count "${count} + 1")
endforeach()

if(count EQUAL 0)
  set(entries "    {0, 0, 0},\n")
endif()

set(content "/* Generated from migrations/NNN_name.sql by scheduler/embed_migrations.cmake: do not edit. */
#include \"store/migrate.h\"

${arrays}const db_migration db_migrations[] = {
${entries}};
const int db_nmigrations = ${count};
")

file(WRITE "${OUTPUT}" "${content}")
