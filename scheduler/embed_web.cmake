# Writes OUTPUT, a C file defining sched__assets[] and sched__nassets
# (scheduler/web.h), from the status page's files: every FILES entry
# ('|'-separated absolute paths: web/*.js, web/*.css, uPlot's dist files) is served as
# /static/BASENAME with a content type from its extension and an ETag from
# its SHA-256.
#
#   cmake "-DFILES=a.js|b.css" -DOUTPUT=file.c -P embed_web.cmake
#
# Each file becomes a NUL-terminated byte array (cmake/embed.cmake).
cmake_minimum_required(VERSION 3.22)
include(${CMAKE_CURRENT_LIST_DIR}/../cmake/embed.cmake)
if(NOT FILES OR NOT OUTPUT)
  message(FATAL_ERROR "usage: cmake \"-DFILES=a.js|b.css\" -DOUTPUT=file.c -P embed_web.cmake")
endif()
string(REPLACE "|" ";" FILES "${FILES}")

set(arrays "")
set(entries "")
set(count 0)
set(seen "")
foreach(f IN LISTS FILES)
  get_filename_component(name "${f}" NAME)
  if(NOT name MATCHES "^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
    message(FATAL_ERROR "${f}: a web asset is named with letters, digits, '_', '.' and '-'")
  endif()
  if(name IN_LIST seen)
    message(FATAL_ERROR "${f}: two web assets are named ${name}")
  endif()
  list(APPEND seen "${name}")
  if(name MATCHES "\\.js$")
    set(type "text/javascript; charset=utf-8")
  elseif(name MATCHES "\\.css$")
    set(type "text/css; charset=utf-8")
  elseif(name MATCHES "\\.svg$")
    set(type "image/svg+xml")
  elseif(name MATCHES "\\.png$")
    set(type "image/png")
  else()
    message(FATAL_ERROR "${f}: no content type known for this extension")
  endif()
  file(SIZE "${f}" size)
  file(SHA256 "${f}" sha)
  string(SUBSTRING "${sha}" 0 20 etag)
  ss_embed_array(arrays "${f}" "${name}" "static const unsigned char asset_${count}")
  string(APPEND entries "    {\"${name}\", \"${type}\", asset_${count}, ${size}, \"\\\"${etag}\\\"\"},\n")
  math(EXPR count "${count} + 1")
endforeach()

set(content "/* Generated from web/ and uPlot by scheduler/embed_web.cmake: do not edit. */
#include \"scheduler/web.h\"

${arrays}const sched__asset sched__assets[] = {
${entries}};
const int sched__nassets = ${count};
")

file(WRITE "${OUTPUT}" "${content}")
