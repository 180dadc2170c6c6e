# Writes OUTPUT, a C file defining db_migrations[] and db_nmigrations
# (store/migrate.h), from MIGRATIONS_DIR/NNN_name.sql, ordered by NNN.
#
#   cmake -DMIGRATIONS_DIR=dir [-DLATER_DIR=dir2] -DOUTPUT=file.c -P embed_migrations.cmake
#
# LATER_DIR (optional) holds migrations of a later schema, appended after
# MIGRATIONS_DIR's and numbered above every one of them: the test build of
# the next version (tests/CMakeLists.txt, scalesweep_next) embeds
# tests/integration/upgrade/ this way.
#
# Each file becomes a NUL-terminated byte array (cmake/embed.cmake), so no
# character in the SQL needs escaping.
include(${CMAKE_CURRENT_LIST_DIR}/../cmake/embed.cmake)
if(NOT MIGRATIONS_DIR OR NOT OUTPUT)
  message(FATAL_ERROR "usage: cmake -DMIGRATIONS_DIR=dir -DOUTPUT=file.c -P embed_migrations.cmake")
endif()

set(arrays "")
set(entries "")
set(count 0)
set(previous -1)
foreach(dir IN ITEMS "${MIGRATIONS_DIR}" "${LATER_DIR}")
  if(NOT dir)
    continue()
  endif()
  get_filename_component(label "${dir}" NAME)
  file(GLOB files RELATIVE "${dir}" "${dir}/*.sql")
  list(SORT files COMPARE NATURAL)
  foreach(f IN LISTS files)
    if(NOT f MATCHES "^([0-9]+)_([A-Za-z0-9_]+)\\.sql$")
      message(FATAL_ERROR "${label}/${f}: a migration is named NNN_name.sql "
                          "(digits, an underscore, then letters, digits and underscores)")
    endif()
    set(name "${CMAKE_MATCH_2}")
    string(REGEX REPLACE "^0+([0-9])" "\\1" version "${CMAKE_MATCH_1}")
    if(version LESS_EQUAL previous AND dir STREQUAL MIGRATIONS_DIR)
      message(FATAL_ERROR "${label}/${f}: version ${version} is used twice")
    elseif(version LESS_EQUAL previous)
      message(FATAL_ERROR "${dir}/${f}: version ${version} must be above every migration "
                          "before it (the newest is ${previous}): number it higher")
    endif()
    set(previous ${version})

    ss_embed_array(arrays "${dir}/${f}" "${label}/${f}" "static const char sql_${count}")
    string(APPEND entries "    {${version}, \"${name}\", sql_${count}},\n")
    math(EXPR count "${count} + 1")
  endforeach()
endforeach()

if(count EQUAL 0)
  set(entries "    {0, 0, 0},\n")
endif()

set(content "/* Generated from migrations/NNN_name.sql by store/embed_migrations.cmake: do not edit. */
#include \"store/migrate.h\"

${arrays}const db_migration db_migrations[] = {
${entries}};
const int db_nmigrations = ${count};
")

file(WRITE "${OUTPUT}" "${content}")
