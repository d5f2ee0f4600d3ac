# cmake -P script: installs flashtile into a fresh prefix, then configures, builds and runs the consumer project
# against it, the way a user's project finds the package. Every step must succeed.
#   -DCONSUMER_DIR=  tests/install/consumer
#   -DWORK_DIR=      scratch folder, emptied first
#   -DGENERATOR= -DCXX_COMPILER= -DC_COMPILER=   what the calling build uses
# and either
#   -DBUILD_DIR=     a built flashtile tree, installed as it is,
# or
#   -DSOURCE_DIR= -DSHARED=ON|OFF   a flashtile source tree, first built into WORK_DIR/library with
#                                   BUILD_SHARED_LIBS=SHARED (tests and tools left out), then installed.
foreach(var CONSUMER_DIR WORK_DIR GENERATOR CXX_COMPILER C_COMPILER)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "install_test.cmake: -D${var}= is required")
  endif()
endforeach()

function(run_step name)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${name} failed (${rc}):\n${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "${name}: ok")
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

set(common -G "${GENERATOR}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=${CXX_COMPILER})
set(prefix "${WORK_DIR}/prefix")
file(REMOVE_RECURSE "${WORK_DIR}")
if(DEFINED SOURCE_DIR)
  set(BUILD_DIR "${WORK_DIR}/library")
  run_step("configure flashtile" ${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${BUILD_DIR}" ${common}
           -DCMAKE_C_COMPILER=${C_COMPILER} -DBUILD_SHARED_LIBS=${SHARED}
           -DFLASHTILE_BUILD_TESTS=OFF -DFLASHTILE_BUILD_TOOLS=OFF)
  run_step("build flashtile" ${CMAKE_COMMAND} --build "${BUILD_DIR}" --parallel 2)
endif()
run_step(install ${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${prefix}")
# The package registry could point find_package at a build tree instead; only the prefix may be searched.
run_step("configure consumer" ${CMAKE_COMMAND} -S "${CONSUMER_DIR}" -B "${WORK_DIR}/consumer" ${common}
         -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
file(STRINGS "${WORK_DIR}/consumer/CMakeCache.txt" found REGEX "^flashtile_DIR:")
string(FIND "${found}" "${prefix}/" at)
if(at EQUAL -1)
  message(FATAL_ERROR "find_package found flashtile outside the install prefix: ${found}")
endif()
run_step("build consumer" ${CMAKE_COMMAND} --build "${WORK_DIR}/consumer")
run_step("run consumer" "${WORK_DIR}/consumer/consumer")
message(STATUS "${step_output}")
